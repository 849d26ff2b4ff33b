# Sourced by the device scripts (device_owed.sh, perf_peers_device.sh): the wheels in $WHEELS, the packages the
# device image lacks, installed into /tmp/site without the network and put on PYTHONPATH; none there, nothing done.
if compgen -G "$WHEELS/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$WHEELS"/*.whl || exit 9
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
