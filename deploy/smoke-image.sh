#!/usr/bin/env bash
# Build the container image from ./Containerfile and smoke-test it, on a machine that cannot pull
# images from a registry: `bash deploy/smoke-image.sh` from a clone, as root, after
# scripts/test.sh made .venv. CI runs it (.ci/run).
#
# - the base: a minimal Debian with python3 made by mmdebstrap, imported with podman and given
#   to the recipe as --build-arg BASE (what the public python image provides: python3, its venv
#   module, useradd, libstdc++);
# - the build: `buildah bud --isolation chroot`, the package's wheels built here first and
#   mounted into the build, so it needs no package index (--build-arg PIP_OPTIONS);
# - the run: the image's entry point under `buildah run --isolation chroot` on the host network,
#   against PostgreSQL on 127.0.0.1:5432 (a database made by the image's own
#   `jobnik migrate --create-database`, dropped afterwards): it must answer /liveness, pass its
#   own health check, and serve a job from creation to COMPLETED.
#
# Installs mmdebstrap, podman and buildah from Debian's packages when they are missing. All it
# makes (its container storage included) lives in one temporary directory, removed at the end.
# Settings: JOBNIK_SMOKE_PG (postgresql://postgres@127.0.0.1:5432), SUITE (bookworm),
# STORAGE_DRIVER (overlay; vfs where overlay mounts are refused).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PY=${PY:-.venv/bin/python}
SUITE=${SUITE:-bookworm}
PG=${JOBNIK_SMOKE_PG:-postgresql://postgres@127.0.0.1:5432}
DRIVER=${STORAGE_DRIVER:-overlay}
started=$SECONDS
step() { echo "--- [$((SECONDS - started)) s] $*"; }

need=()
for tool in mmdebstrap podman buildah; do
  command -v "$tool" >/dev/null 2>&1 || need+=("$tool")
done
source scripts/debian.sh
debian_packages deploy/smoke-image.sh "${need[@]}"

work=$(mktemp -d /tmp/jobnik-image.XXXXXX)
store=(--root "$work/storage" --runroot "$work/run" --storage-driver "$DRIVER")
database="jobnik_smoke_$$"
server=""
container=""
cleanup() {
  if [ -n "$server" ]; then kill -TERM -- "-$server" 2>/dev/null || true; wait "$server" || true; fi
  if [ -n "$container" ]; then buildah "${store[@]}" rm "$container" >/dev/null || true; fi
  "$PY" -c 'import sys, psycopg
with psycopg.connect(sys.argv[1] + "/postgres", autocommit=True) as c:
    c.execute(f"DROP DATABASE IF EXISTS {sys.argv[2]} WITH (FORCE)")' "$PG" "$database" || true
  buildah "${store[@]}" rmi --all --force >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

step "a minimal Debian $SUITE with python3 (mmdebstrap)"
mmdebstrap --quiet --variant=essential --include=python3,python3-venv,passwd,libstdc++6 \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  "$SUITE" "$work/base.tar"
podman "${store[@]}" import --quiet "$work/base.tar" localhost/jobnik-smoke-base:latest >/dev/null
rm "$work/base.tar"

step "the package's wheels, for a build without a package index"
"$PY" -m pip wheel --quiet --disable-pip-version-check --wheel-dir "$work/wheels" . "setuptools>=69"

step "the image (buildah bud --isolation chroot)"
buildah "${store[@]}" bud --quiet --isolation chroot --format docker --pull=never \
  --build-arg BASE=localhost/jobnik-smoke-base:latest \
  --build-arg PIP_OPTIONS="--no-index --find-links /wheels" \
  --volume "$work/wheels:/wheels:ro" \
  --tag localhost/jobnik-smoke:latest --file Containerfile . >/dev/null
inspect() { buildah "${store[@]}" inspect --format "$1" localhost/jobnik-smoke:latest; }
entrypoint=$(inspect '{{range .OCIv1.Config.Entrypoint}}{{.}} {{end}}')
health=$(inspect '{{range $i, $e := .Docker.Config.Healthcheck.Test}}{{if $i}}{{$e}}{{end}}{{end}}')
user=$(inspect '{{.OCIv1.Config.User}}')
[ "$entrypoint" = "jobnik serve " ] || { echo "entry point: '$entrypoint'" >&2; exit 1; }
[ -n "$health" ] || { echo "the image has no health check" >&2; exit 1; }
[ -n "$user" ] && [ "$user" != root ] && [ "$user" != 0 ] || { echo "runs as '$user'" >&2; exit 1; }

step "the image against PostgreSQL ($PG/$database)"
port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port"
container=$(buildah "${store[@]}" from --pull=never localhost/jobnik-smoke:latest)
run=(buildah "${store[@]}" run --isolation chroot --network host
  -e "JOBNIK_DATABASE_URL=$PG/$database" -e "JOBNIK_PORT=$port" -e JOBNIK_AUTH=off "$container" --)
"${run[@]}" jobnik migrate --create-database
setsid "${run[@]}" $entrypoint >"$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 120); do
  curl -fsS "$url/liveness" >/dev/null 2>&1 && break
  kill -0 "$server" 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
  sleep 0.5
done
curl -fsS "$url/liveness" || { cat "$work/serve.log" >&2; exit 1; }
echo
"${run[@]}" sh -c "$health" || { echo "the image's health check failed" >&2; exit 1; }
"$PY" - "$url" <<'EOF'
import sys

from jobnik.workers import Consumer, Producer

url = sys.argv[1]
producer, consumer = Producer(url), Consumer(url)
job = producer.create_job("smoke", {"image": True})
stage = producer.create_stage(job.id, "smoke-image", {})
producer.create_tasks(stage.id, [{"n": 1}])
task = consumer.dequeue("smoke-image")
assert task is not None, "nothing to dequeue"
consumer.complete(task, {"ok": True})
done = producer.job(job.id)
assert done.status == "COMPLETED", done
print(f"job {job.id}: {done.status} through the image")
EOF

step "done: the image builds, serves, passes its health check and runs a job"
