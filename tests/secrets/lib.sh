# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# The secrets tests' harness (issue 13), on top of tests/egress/lib.sh (its network namespace, test CA, dnsmasq,
# the Debian image, the signer and the daemon; its EXIT trap cleans everything up). Source it with BUILD set.
# Root. Nothing leaves the machine: every name a box uses is pinned by the daemon's --resolve to an address in
# the test's namespace.
#
#   sc_up               namespace + test CA + a certificate for every name below + a bare git repository +
#                       dnsmasq + tests/secrets/origin.py (HTTPS :443 and HTTP :80 on every namespace address)
#   sc_daemon_start ... the daemon with --egress-ca (the test CA: the proxy verifies the origins with it) and
#                       --resolve for api.github.com, api.anthropic.com (-> EG_ORIGIN_IP), evil.example
#                       (-> EG_OTHER_IP), untrusted.example (-> EG_ORIGIN_IP, whose certificate does not name it)
#   sc_box NAME ARGS... tkbox run the Debian image with GH=$SC_VALUE and AK=$SC_AK in the CLI's env (so
#                       --secret GH=env:GH@... works), then install tests/secrets/sc-client.py as /tmp/sc.py.
#                       Unlike eg_box it adds no CA to the box: the box's trust is the product's.
#   sc_start NAME ARGS... what every test starts with: sets T0, sc_up, the image, the signer, sc_daemon_start,
#                       then sc_box NAME ARGS... as the first TAP check ("run NAME ARGS..."); a box that does not
#                       start ends the test (the plan so far, exit 1)
#   sc_py BOX SECS MODE ARGS...    sc-client.py in the box; JSON lines on stdout
#   sc_verdict JQ       a field of the origin's verdict (DIR/verdict.json), e.g. '.violations | length'
#   sc_reqs JQ          the origin's requests (one JSON object a line) filtered by a jq expression (-c)
#   sc_seen_in FILE...  the files (recursively) that hold a secret's value, its first 6 bytes, or its whole
#                       hex or base64 form; none: returns 1 (the test's own value files are never passed)
#   sc_box_saw RAW_B64  what the box got (sc-client's "raw"), de-chunked, trailers and gzip/deflate decoded:
#                       prints the forms of a value found in it (nothing when none) and "len=N" of the body
#
# The secrets' values: SC_VALUE (GH, "ghp_" + 36 random letters and digits, bound to api.github.com) and SC_AK
# (ANTHROPIC_API_KEY, bound to api.anthropic.com in header x-api-key). They live in $SC_VALUES (mode 0700) and in
# the origin's process only.

: "${BUILD:?BUILD must name the build directory}"
SC_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../egress/lib.sh
source "$SC_HERE/../egress/lib.sh"

sc_rand() { tr -dc 'A-Za-z0-9' </dev/urandom | head -c "$1"; }
SC_VALUE=ghp_$(sc_rand 36)
SC_AK=sk-ant-$(sc_rand 40)
SC_VALUES=
SC_ORIGIN=
SC_ORIGIN_PID=

# A leaf for every name the secrets tests use, from the harness's test CA.
sc_certs() {
	local d=$EG_DIR/pki
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=api.github.com" \
		-keyout "$d/sc.key" -out "$d/sc.csr" >/dev/null 2>&1 || eg_die "openssl: origin key"
	printf '%s\n' "subjectAltName=DNS:api.github.com,DNS:api.anthropic.com,DNS:evil.example,DNS:origin.test.example,DNS:*.test.example,IP:$EG_ORIGIN_IP,IP:$EG_OTHER_IP" \
		"extendedKeyUsage=serverAuth" "basicConstraints=CA:FALSE" >"$d/sc.cnf"
	openssl x509 -req -in "$d/sc.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial -days 2 \
		-extfile "$d/sc.cnf" -out "$d/sc.pem" >/dev/null 2>&1 || eg_die "openssl: origin certificate"
}

sc_repo() {
	local g=$EG_DIR/sc-git
	mkdir -p "$g"
	(
		cd "$g" && git init -q -b main src && cd src && echo "$EG_NONCE" >README &&
			git add README && git -c user.name=t -c user.email=t@test.example commit -qm init &&
			git clone -q --bare . "$g/repo.git" && cd "$g/repo.git" && git update-server-info
	) || eg_die "git: the test repository"
	SC_REPO=$g/repo.git
}

sc_origin_up() {
	SC_VALUES=$EG_DIR/values
	SC_ORIGIN=$EG_DIR/origin
	mkdir -p -m 0700 "$SC_VALUES"
	mkdir -p "$SC_ORIGIN"
	printf '%s' "$SC_VALUE" >"$SC_VALUES/GH"
	printf '%s' "$SC_AK" >"$SC_VALUES/AK"
	eg_in_ns python3 "$SC_HERE/origin.py" --dir "$SC_ORIGIN" --cert "$EG_DIR/pki/sc.pem" --key "$EG_DIR/pki/sc.key" \
		--repo "$SC_REPO" --secret "GH:$SC_VALUES/GH:api.github.com:Authorization" \
		--secret "ANTHROPIC_API_KEY:$SC_VALUES/AK:api.anthropic.com:x-api-key" >>"$EG_DIR/origin.log" 2>&1 &
	SC_ORIGIN_PID=$!
	EG_NGINX_PID=$SC_ORIGIN_PID # eg_cleanup stops it
	for _ in $(seq 100); do
		[ -e "$SC_ORIGIN/ready" ] && eg_in_ns ss -Hltn 'sport = :443' | grep -q . && return 0
		kill -0 "$SC_ORIGIN_PID" 2>/dev/null || break
		sleep 0.1
	done
	cat "$EG_DIR/origin.log"
	eg_die "tests/secrets/origin.py did not start in $EG_NS"
}

sc_up() {
	eg_net_up
	eg_certs
	sc_certs
	sc_repo
	eg_dns_up
	sc_origin_up
}

sc_daemon_start() {
	eg_daemon_start --egress-ca "$EG_CA" --resolve "api.github.com=$EG_ORIGIN_IP" \
		--resolve "api.anthropic.com=$EG_ORIGIN_IP" --resolve "evil.example=$EG_OTHER_IP" \
		--resolve "untrusted.example=$EG_ORIGIN_IP" "$@"
}

sc_box() {
	local name=$1
	shift
	GH=$SC_VALUE AK=$SC_AK timeout --kill-after=10 900 "$TKBOX" run --image "oci:$EG_LAYOUT:latest" --name "$name" \
		--memory 512M --disk 512M "$@" </dev/null >"$WORK/run-$name.out" 2>"$WORK/run-$name.err" || return 1
	"$TKBOX" exec -i "$name" -- sh -c 'cat > /tmp/sc.py' <"$SC_HERE/sc-client.py" >/dev/null 2>"$WORK/sc-$name.err"
}

sc_start() {
	local name=$1
	T0=$(t)
	sc_up
	eg_image
	signer_init && signer_start || eg_die "no signer"
	sc_daemon_start || eg_die "no daemon"
	echo "# harness, image and daemon ready in $(elapsed "$T0") s"
	if sc_box "$@"; then ok "run $*"; else
		notok "run $*" "$(cat "$WORK/run-$name.err" "$WORK/sc-$name.err" 2>/dev/null)" "$(tail -5 "$WORK/daemon.log")"
		echo "1..$((pass + fail))"
		exit 1
	fi
}

sc_py() {
	local box=$1 secs=$2
	shift 2
	timeout --kill-after=5 "$secs" "$TKBOX" exec "$box" -- python3 /tmp/sc.py "$@" </dev/null 2>&1
}

sc_verdict() { jq -c "$1" "$SC_ORIGIN/verdict.json" 2>/dev/null; }
sc_reqs() { jq -c "$1" "$SC_ORIGIN/requests.jsonl" 2>/dev/null; }

# The secrets' values in the forms a record could hold them: raw, first 6 bytes, hex, base64.
sc_patterns() {
	local v
	for v in "$SC_VALUE" "$SC_AK"; do
		printf '%s\n%s\n' "$v" "${v:0:6}"
		printf '%s' "$v" | od -An -v -tx1 | tr -d ' \n'
		echo
		printf '%s' "$v" | base64 -w0 | tr -d '='
		echo
	done
}

sc_seen_in() {
	local pats
	pats=$(mktemp "$SC_VALUES/pats.XXXXXX")
	sc_patterns >"$pats"
	grep -rlaiF -f "$pats" "$@" 2>/dev/null
	local rc=$?
	rm -f "$pats"
	return $rc
}

sc_box_saw() {
	SC_V1=$SC_VALUE SC_V2=$SC_AK python3 - "$1" <<'PY'
import base64, gzip, os, re, sys, zlib
raw = base64.b64decode(sys.argv[1] or "")
vals = [os.environ["SC_V1"].encode(), os.environ["SC_V2"].encode()]

def variants(b):
    out = [b, b.lower()]
    try:
        import urllib.parse
        out.append(urllib.parse.unquote_to_bytes(b).lower())
    except Exception:
        pass
    out.append(re.sub(rb"\\u00([0-9a-fA-F]{2})", lambda m: bytes([int(m.group(1), 16)]), b).lower())
    return out

def forms(b):
    f = set()
    for v in vals:
        for d in variants(b):
            if v.lower() in d or v[:6].lower() in d:
                f.add("raw")
            if v.hex().encode() in d:
                f.add("hex")
        for k in range(3):
            enc = base64.b64encode(b"\0" * k + v)
            core = enc[(k * 4 + 2) // 3: len(enc) - 4]
            for c in (core, core.replace(b"+", b"-").replace(b"/", b"_")):
                if len(c) >= 8 and c in b:
                    f.add("base64")
    return f

found = set(forms(raw))
head, _, body = raw.partition(b"\r\n\r\n")
hl = head.lower()
if b"transfer-encoding: chunked" in hl:
    data, rest = b"", body
    while rest:
        ln, _, rest = rest.partition(b"\r\n")
        try:
            n = int(ln.split(b";")[0], 16)
        except ValueError:
            break
        if n == 0:
            found |= forms(rest)  # the trailers
            break
        data, rest = data + rest[:n], rest[n + 2:]
    body = data
m = re.search(rb"content-encoding:\s*(\S+)", hl)
if m:
    try:
        body = gzip.decompress(body) if m.group(1) in (b"gzip", b"x-gzip") else zlib.decompress(body)
    except Exception as e:
        print("undecodable=%s" % type(e).__name__)
found |= forms(body)
for x in sorted(found):
    print("found=" + x)
print("len=%d" % len(body))
PY
}
