"""An OpenAI-compatible HTTP server over engine.LLM: `python -m engine serve [MODEL] --host H --port N`.

FastAPI on uvicorn, the ecosystem's usual ASGI pair (vLLM's own server is built on them): request bodies
are pydantic models (already a core dependency), streaming is server-sent events, and a client that
disconnects cancels its handler, which aborts its request. One background thread runs the engine
(engine.serve.loop); handlers only queue requests and await their outputs.
"""
