#!/bin/sh
# A request sent again after the signer restarts (kill -9, then up) gets the
# first answer, never a second record: decide, complete and observe are each
# answered, the signer is SIGKILLed, restarted, and the same request (same
# request_id, same payload) is sent again. The replies must be the same JSON
# (the stored one comes back in JCS key order) and the store must hold exactly one record per request_id. The same id with
# another payload is a conflict. This is what the daemon's signer link relies
# on when it resends a request whose connection broke (src/daemon/signer-link.c).
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || { echo "SKIP: needs python3 (sqlite3 module)"; exit 77; }
"$SIGNER" init --dev >/dev/null || fail "init"
"$SIGNER" up --wait >/dev/null || fail "up"
HELLO='{"method":"hello","proto":1,"role":"runtime"}'
rpc() { printf '%s\n%s\n' "$HELLO" "$1" | "$SIGNER" rpc | tail -n 1; }
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
restart() {
	pid=$(cat "$TKBOX_SIGNER_DIR/signer.pid")
	kill -9 "$pid"
	while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
	"$SIGNER" up --wait >/dev/null || fail "restart after kill -9"
}
# Records in the store whose request_id is $1 (or, for "type=T", whose type is T).
count() {
	python3 - "$TKBOX_SIGNER_DIR/store.db" "$1" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
key, want = sys.argv[2].split("=", 1) if "=" in sys.argv[2] else ("request_id", sys.argv[2])
print(sum(1 for (line,) in db.execute("SELECT line FROM records") if json.loads(line)["event"].get(key) == want))
PY
}
# send NAME REQUEST: answered, kill -9, restart, the same again: the same reply, one record.
send_twice() {
	first=$(rpc "$2")
	case $first in *'"error"'*) fail "$1: $first" ;; esac
	restart
	again=$(rpc "$2")
	python3 -c 'import json,sys; sys.exit(json.loads(sys.argv[1]) != json.loads(sys.argv[2]))' "$first" "$again" || fail "$1 sent again after a restart got another reply: $first then $again"
	n=$(count "$3")
	[ "$n" = 1 ] || fail "$1 sent again after a restart: $n records with request_id $3, not 1"
	echo "$first"
}

reg=$(send_twice register_run '{"method":"register_run","request_id":"rs-reg","agent":{"name":"restart"}}' type=run.registered)
run=$(field "$reg" run_id)
tok=$(field "$reg" run_token)
RUN="\"run_id\":\"$run\",\"run_token\":\"$tok\""
DECIDE="{\"method\":\"decide\",\"request_id\":\"rs-dec\",$RUN,\"tool_call_id\":\"t1\",\"tool\":\"Bash\",\"args\":{\"command\":\"echo hi\"}}"
dec=$(send_twice decide "$DECIDE" rs-dec)
[ "$(field "$dec" decision)" = allow ] || fail "decide: $dec"
did=$(field "$dec" decision_id)
digest=$(python3 -c 'import hashlib,json,sys
print("sha256:" + hashlib.sha256(json.dumps({"args":{"command":"echo hi"},"tool":"Bash"},separators=(",",":")).encode()).hexdigest())')
send_twice complete "{\"method\":\"complete\",\"request_id\":\"rs-com\",$RUN,\"decision_id\":\"$did\",\"args_digest\":\"$digest\",\"status\":\"ok\",\"exit_code\":0}" rs-com >/dev/null
send_twice observe "{\"method\":\"observe\",\"request_id\":\"rs-obs\",$RUN,\"kind\":\"tkbox.box\",\"data\":{\"state\":\"running\"}}" rs-obs >/dev/null
# The same id with another payload is refused, and records nothing.
other=$(rpc "{\"method\":\"decide\",\"request_id\":\"rs-dec\",$RUN,\"tool_call_id\":\"t1\",\"tool\":\"Bash\",\"args\":{\"command\":\"echo other\"}}")
case $other in *'"code":"conflict"'*) ;; *) fail "the same request_id with another payload: $other" ;; esac
[ "$(count rs-dec)" = 1 ] || fail "a conflicting request was recorded"
# A fresh id is a new decision (the dedupe is by id, not by payload).
new=$(rpc "$(echo "$DECIDE" | sed 's/rs-dec/rs-dec2/')")
[ "$(field "$new" decision_id)" != "$did" ] || fail "a new request_id got the old decision: $new"
"$SIGNER" down >/dev/null
check_log
echo "PASS: restart"
