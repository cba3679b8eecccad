#!/usr/bin/env bash
# Installs pdserve's build and test dependencies from Debian's packages, then Node.js and
# the test clients' npm packages (both skipped with --no-test-clients: `make serve` needs
# neither node nor the npm registry). Idempotent: packages already present are skipped;
# safe to run as root on a fresh Debian 12 (else apt runs through sudo).
set -euo pipefail
test_clients=1
case "${1:-}" in
  --no-test-clients) test_clients=0 ;;
  "") ;;
  *) echo "usage: scripts/install-deps.sh [--no-test-clients]" >&2; exit 2 ;;
esac

PKGS=(
  build-essential cmake pkg-config git curl ca-certificates ccache
  nlohmann-json3-dev libcpp-httplib-dev libspdlog-dev libfmt-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcurl4-openssl-dev libpcre2-dev libzstd-dev gnuplot-nox
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  # KV store tier (#13), discovery and multi-host tests (#16), planner (#15), fuzzers (#20)
  redis-server redis-tools libhiredis-dev etcd-server etcd-client
  iproute2 libglpk-dev clang libclang-rt-14-dev
  python3-yaml

)

# kubectl (renders the Kubernetes manifests): Debian's kubernetes-client, unless another
# kubectl (e.g. a cloud SDK's, which owns the same path) is already installed.
command -v kubectl >/dev/null 2>&1 || PKGS+=(kubernetes-client)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all packages present"
fi

# Node.js + npm run the OpenAI-client tests (not installed with --no-test-clients); Debian's
# nodejs is used only when no npm is present.
if [ "$test_clients" = 1 ] && ! command -v npm >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi

# The official OpenAI Node.js client, for tests/clients (from the npm registry, pinned by
# tests/clients/package-lock.json), with ajv (JSON Schema validator) and zod for the
# structured-output tests.
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
if [ "$test_clients" = 1 ] && { [ ! -d "$ROOT/tests/clients/node_modules/openai" ] || [ ! -d "$ROOT/tests/clients/node_modules/ajv" ] ||
   [ ! -d "$ROOT/tests/clients/node_modules/zod" ]; }; then
  (cd "$ROOT/tests/clients" && npm ci --no-audit --no-fund --loglevel=error)
fi
