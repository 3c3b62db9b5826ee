#!/bin/sh
# /usr/bin/edge-node of the duet-edge package: the binary in /usr/lib/duet, with the ONNX Runtime
# shipped beside it and the models the service uses (/var/lib/duet/models), unless the
# environment names others (ORT_DYLIB_PATH, DUET_HOME).
: "${ORT_DYLIB_PATH:=/usr/lib/duet/libonnxruntime.so}"
: "${DUET_HOME:=/var/lib/duet}"
export ORT_DYLIB_PATH DUET_HOME
exec /usr/lib/duet/edge-node "$@"
