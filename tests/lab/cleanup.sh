#!/bin/sh
# Tear down one partition lab: kill every process inside its network namespaces (etcd members,
# delay helpers, and anything a test started there with `ip netns exec`), delete the namespaces,
# and remove its scratch directories. Deleting a namespace destroys its veths and the bridge with
# it; the lab never creates anything in the host's namespace, so nothing else is left behind.
#
#   cleanup.sh PREFIX [keep-logs]    e.g. cleanup.sh rplab-12345-1
#     namespaces PREFIX-*, etcd data /dev/shm/PREFIX-*, logs ${TMPDIR:-/tmp}/PREFIX-* (kept with
#     keep-logs: the lab's Drop passes it when the test panicked)
#
# Used three ways: by the lab's Drop (normal end and panics), by the watchdog that each lab starts
# in its own process group and that runs this when the test process dies (SIGINT, SIGTERM, SIGKILL:
# its stdin pipe from the test process reaches EOF), and by the stale sweep at the next lab start.
prefix=$1
case "$prefix" in
  rplab-[0-9]*-[0-9]*) ;;
  *) echo "cleanup.sh: refusing prefix '$prefix' (expected rplab-*)" >&2; exit 2 ;;
esac

namespaces() { ip netns list 2>/dev/null | awk '{print $1}' | grep "^$prefix-"; }
pids() { for ns in $(namespaces); do ip netns pids "$ns" 2>/dev/null; done; }

# A zombie still answers kill -0 but is gone for our purposes (its parent reaps it).
alive() { for q in "$@"; do grep -qs '^State:[[:space:]]*[^Z]' "/proc/$q/status" && echo "$q"; done; }

p=$(pids)
if [ -n "$p" ]; then
  kill -TERM $p 2>/dev/null
  i=0 # up to 1 s for a clean exit, then SIGKILL
  while [ $i -lt 10 ] && [ -n "$(alive $p)" ]; do sleep 0.1; i=$((i + 1)); done
  a=$(alive $p)
  [ -n "$a" ] && kill -KILL $a 2>/dev/null
fi
# Anything started meanwhile.
p=$(pids)
[ -n "$p" ] && kill -KILL $p 2>/dev/null
for ns in $(namespaces); do ip netns del "$ns" 2>/dev/null; done
rm -rf /dev/shm/"$prefix"-*
[ "$2" = keep-logs ] || rm -rf "${TMPDIR:-/tmp}/$prefix"-*
exit 0
