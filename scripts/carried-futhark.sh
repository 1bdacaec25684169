# Sourced by the GPU scripts: the Futhark compiler, when carried (.carry-futhark/futhark.tar.xz, made
# on the development machine by scripts/prepare-device-carry.sh --futhark-only), unpacked into
# /tmp/futhark-tools and exported as $FUTHARK, unless $FUTHARK is set already: tests that build a
# .fut for cuda there (pf.load("x.fut", backend="cuda")) then run.
if [ -f .carry-futhark/futhark.tar.xz ] && [ -z "${FUTHARK:-}" ]; then
  mkdir -p /tmp/futhark-tools && tar xJf .carry-futhark/futhark.tar.xz -C /tmp/futhark-tools \
    && export FUTHARK=/tmp/futhark-tools/bin/futhark && echo "futhark: $($FUTHARK --version | head -1)"
fi
