# Sourced by the shell tests that need the test engine (scripts/test.sh provides it):
#   require_engine        sets $socket and $image, or skips the test (exit 77)
#   count_our_containers  how many containers (any state) carry $prefix in their name
#   remove_our_containers force-removes them (for a cleanup trap)
# The engine is asked directly over its socket, never through the code under test.

require_engine() {
  socket="${SANDBOXD_TEST_DOCKER_SOCKET:-}"
  if [ -z "$socket" ] || [ ! -S "$socket" ]; then
    echo "SKIP: needs SANDBOXD_TEST_DOCKER_SOCKET (scripts/test.sh starts the engine)"
    exit 77
  fi
  image="${SANDBOXD_TEST_IMAGE:-localhost/sandboxd-test-sandbox:latest}"
}

our_containers_json() {
  curl -s --max-time 30 --unix-socket "$socket" \
    "http://d/containers/json?all=true&filters=%7B%22name%22%3A%5B%22$prefix%22%5D%7D"
}

count_our_containers() {
  our_containers_json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))'
}

remove_our_containers() {
  local ids id
  ids=$(our_containers_json |
    python3 -c 'import json,sys; [print(c["Id"]) for c in json.load(sys.stdin)]' 2>/dev/null)
  for id in $ids; do
    curl -s --max-time 30 --unix-socket "$socket" -X DELETE "http://d/containers/$id?force=true" >/dev/null
  done
}
