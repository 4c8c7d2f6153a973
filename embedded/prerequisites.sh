# Sourced by run-qemu.sh and run-rtic.sh: installs the thumbv7em-none-eabihf target and
# QEMU where it can, and otherwise ends the calling script with one SKIP line (exit 0).
#
#   require_target_and_qemu "LABEL"    # LABEL names the check in the SKIP line

require_target_and_qemu() {
  if ! rustup target list --installed | grep -qx thumbv7em-none-eabihf; then
    rustup target add thumbv7em-none-eabihf >/dev/null 2>&1 || {
      echo "SKIP $1: cannot install the thumbv7em-none-eabihf target"
      exit 0
    }
  fi
  if ! command -v qemu-system-arm >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
      { apt-get update && apt-get install -y qemu-system-arm; } >/dev/null 2>&1 || true
    fi
    if ! command -v qemu-system-arm >/dev/null 2>&1; then
      echo "SKIP $1: qemu-system-arm is not installed and could not be installed"
      exit 0
    fi
  fi
}
