#!/usr/bin/env bash
# Server benchmark: starts `crosstab serve --demo` (release build) on loopback with a
# fresh data dir and measures, with wrk at 64 connections on this same machine:
#   - requests/s of GET /v1/docs (unauthenticated, unbilled);
#   - requests/s and p99 latency of POST /v1/crosstab on the demo survey (authenticated,
#     billed, each bill committed durably before its 200), with the demo's one fixed
#     request (answered from the server's response cache after the first time);
#   - the same with a request mix that defeats the cache (scripts/bench/crosstab-mix.lua:
#     every request a different target pair, each round going on where the last stopped),
#     i.e. the engine-bound figure;
#   - the same fixed request with a single sign-on bearer token instead of the key: a
#     token of this server, exchanged at the start for an access token of the test
#     OpenID provider (tests/oidc, trusted with `crosstab sso add-oidc`);
#   - the ratios to docs (target >= 0.60, for the fixed request) and the p99 (< 10 ms),
#     and the bearer call's req/s over the key call's (target >= 0.90);
#   - the server process's CPU time per request of each kind (steadier than req/s, which
#     also depends on how much of the shared cores wrk took), the cores' idle time per
#     request (time the run waited, on the ledger's commits, rather than computed) and,
#     on PostgreSQL, the database's CPU per request;
# then stops the server with SIGTERM and checks that bills = 200s + the requests logged
# as billed after their client went away.
#
# Usage: scripts/bench-server.sh [DURATION_SECONDS per run (default 5)]
# Env:   STORE (sqlite | postgres: a throwaway PostgreSQL cluster for the server),
#        BIN (a crosstab binary to measure instead of this tree's release build),
#        BASELINE_BIN (also measure that binary first, and print both summaries; one
#        older than single sign-on is measured without the bearer rows),
#        CARGO_TARGET_DIR (where the release build goes), CONNECTIONS (64), THREADS (2),
#        DIRTY_BACKGROUND_BYTES (e.g. 33554432: sets the machine's vm.dirty_background_bytes
#        for the run and restores it after, as deploy/README.md tells a PostgreSQL host's
#        operator to; unset, the machine's own setting, which on a default Linux lets the
#        database's new pages pile up and go out every 30 s in one burst that stalls the
#        ledger's commits),
#        HALT_POLL_NS (e.g. 200000: on a KVM guest with the haltpoll cpuidle driver, sets
#        how long an idle core polls before it halts, for the run, and restores it after;
#        unset, the machine's own setting: a halted virtual core is woken through the
#        host, tens of microseconds that every hand-off to the ledger's writer and back
#        pays; deploy/README.md),
#        ROUNDS (7 rounds of docs, POST, bearer and mix; the figures are the medians over
#        the rounds: the host's speed drifts by ±10% within a minute, so many short rounds
#        give a steadier median than a few long ones).
#
# Setup: wrk and the server run on the same machine and share its cores (2 here); the
# server uses tokio's default (one worker per core) and wrk THREADS threads, so every
# figure includes the load generator's own CPU. Other work on the machine skews the
# figures: the load average is printed before and after; run it more than once.
set -euo pipefail

duration="${1:-5}"
connections="${CONNECTIONS:-64}"
threads="${THREADS:-2}"
rounds="${ROUNDS:-7}"
root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
command -v wrk >/dev/null || { echo "wrk is required (apt-get install wrk)" >&2; exit 1; }
[ -d "$root/tests/oidc/node_modules/oidc-provider" ] || { echo "tests/oidc needs npm ci (scripts/setup)" >&2; exit 1; }

if [ -n "${BASELINE_BIN:-}" ]; then
    # The baseline first, then this build, each the whole procedure; both summaries last.
    baseline="$(BIN="$BASELINE_BIN" BASELINE_BIN= "$0" "$@" | sed -n '/^=== crosstab server benchmark/,$p')"
    current="$(BASELINE_BIN= "$0" "$@" | sed -n '/^=== crosstab server benchmark/,$p')"
    echo "=== baseline ($BASELINE_BIN) ==="; echo "$baseline"
    echo "=== this build ==="; echo "$current"
    exit 0
fi

if [ -z "${BIN:-}" ]; then
    cargo build --release -p crosstab-server --manifest-path "$root/Cargo.toml" >&2
fi
bin="${BIN:-$target/release/crosstab}"
store="${STORE:-sqlite}"

work="$(mktemp -d)"
server_pid=""
oidc_pid=""
pg_bin=""
postmaster=""
as_pg=()
cleanup() {
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then kill -TERM "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    if [ -n "$oidc_pid" ]; then kill "$oidc_pid" 2>/dev/null || true; wait "$oidc_pid" 2>/dev/null || true; fi
    if [ -n "$pg_bin" ]; then "${as_pg[@]}" "$pg_bin/pg_ctl" -D "$work/pg" -m fast stop >/dev/null 2>&1 || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

# The machine's settings changed for the run are put back, whatever ends it (the array
# is read at exit, so settings changed below are restored too).
restores=()
trap 'cleanup; for restore in ${restores[@]+"${restores[@]}"}; do "$restore" || true; done' EXIT
writeback="the machine's: $(sysctl -n vm.dirty_background_bytes 2>/dev/null || echo '?') bytes, ratio $(sysctl -n vm.dirty_background_ratio 2>/dev/null || echo '?')"
if [ -n "${DIRTY_BACKGROUND_BYTES:-}" ]; then
    dirty_before_bytes="$(sysctl -n vm.dirty_background_bytes)"
    dirty_before_ratio="$(sysctl -n vm.dirty_background_ratio)"
    # Setting one of the pair zeroes the other; the one that was set is put back.
    restore_writeback() {
        if [ "$dirty_before_bytes" != 0 ]; then sysctl -q vm.dirty_background_bytes="$dirty_before_bytes"
        else sysctl -q vm.dirty_background_ratio="$dirty_before_ratio"; fi
    }
    restores+=(restore_writeback)
    sysctl -q vm.dirty_background_bytes="$DIRTY_BACKGROUND_BYTES"
    writeback="vm.dirty_background_bytes=$DIRTY_BACKGROUND_BYTES for this run (deploy/README.md)"
fi
halt_poll_param=/sys/module/haltpoll/parameters/guest_halt_poll_ns
governor="$(cat /sys/devices/system/cpu/cpuidle/current_governor_ro 2>/dev/null || echo none)"
if [ -r "$halt_poll_param" ]; then halt_poll="the machine's: $(cat "$halt_poll_param") ns (cpuidle governor: $governor)"
else halt_poll="no haltpoll cpuidle driver (not a KVM guest, or not loaded)"; fi
if [ -n "${HALT_POLL_NS:-}" ]; then
    [ -w "$halt_poll_param" ] || { echo "HALT_POLL_NS needs the haltpoll cpuidle driver (a KVM guest) and root" >&2; exit 1; }
    [ "$governor" = haltpoll ] || { echo "HALT_POLL_NS needs the haltpoll cpuidle governor (it is: $governor)" >&2; exit 1; }
    halt_poll_before="$(cat "$halt_poll_param")"
    restore_halt_poll() { echo "$halt_poll_before" > "$halt_poll_param"; }
    restores+=(restore_halt_poll)
    echo "$HALT_POLL_NS" > "$halt_poll_param"
    halt_poll="guest_halt_poll_ns=$HALT_POLL_NS for this run (deploy/README.md)"
fi

database=()
if [ "$store" = postgres ]; then
    initdb="$(compgen -G '/usr/lib/postgresql/*/bin/initdb' | sort -V | tail -1 || true)"
    [ -x "$initdb" ] || { echo "PostgreSQL not found (scripts/setup installs it)" >&2; exit 1; }
    pg_bin="$(dirname "$initdb")"
    if [ "$(id -u)" = 0 ]; then chown nobody "$work"; as_pg=(runuser -u nobody --); fi
    pg_port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    "${as_pg[@]}" "$pg_bin/initdb" -D "$work/pg" -U crosstab --auth=trust >/dev/null
    "${as_pg[@]}" "$pg_bin/pg_ctl" -D "$work/pg" -l "$work/pg.log" -w \
        -o "-p $pg_port -k $work -c listen_addresses=127.0.0.1" start >/dev/null
    # WAL segments made and recycled first, so the rounds measure a running database.
    "$root/scripts/bench/pg-wal-warmup.sh" "$pg_bin" "$pg_port"
    postmaster="$(head -1 "$work/pg/postmaster.pid")"
    database=(--database "postgres://crosstab@127.0.0.1:$pg_port/postgres")
fi

"$bin" serve --demo --listen 127.0.0.1:0 --data-dir "$work/data" "${database[@]}" >"$work/stdout" 2>"$work/server.log" &
server_pid=$!
for _ in $(seq 1 600); do
    grep -q '^crosstab listening on ' "$work/stdout" 2>/dev/null && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
    sleep 0.1
done
base="$(sed -n 's/^crosstab listening on //p' "$work/stdout")"
key="$(sed -n 's/^demo key: //p' "$work/stdout")"
[ -n "$base" ] && [ -n "$key" ] || { echo "server did not start" >&2; cat "$work/server.log" >&2; exit 1; }

cat >"$work/post.lua" <<LUA
wrk.method = "POST"
wrk.body = '{"SurveyCode":"DEMO","PopulationBaseCode":"ADULTS","TargetCodes":["F2554","GENDER = 1 AND AGE BETWEEN 18 AND 34"]}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Service-Engine-Authorizer"] = "$key"
LUA

# A binary older than single sign-on (a baseline) has no `sso`: no bearer rows then.
bearer=yes
"$bin" sso --help >/dev/null 2>&1 || bearer=no
if [ "$bearer" = yes ]; then
# The test OpenID provider, trusted for account demo; its stdin is a FIFO this script holds
# open, so it stops when the script ends, however it ends.
mkfifo "$work/oidc.stdin"
(cd "$root/tests/oidc" && exec node provider.mjs) <"$work/oidc.stdin" >"$work/oidc.out" 2>/dev/null &
oidc_pid=$!
exec 3>"$work/oidc.stdin"
for _ in $(seq 1 100); do grep -q issuer "$work/oidc.out" 2>/dev/null && break; sleep 0.1; done
issuer="$(python3 -c 'import json, sys; print(json.load(sys.stdin)["issuer"])' <"$work/oidc.out")"
"$bin" sso add-oidc --data-dir "$work/data" "${database[@]}" --name bench --issuer "$issuer" --account demo >&2
json_field() { python3 -c "import json, sys; print(json.load(sys.stdin)[\"$1\"])"; }
idp_token="$(curl -sf "$issuer/token" -d grant_type=client_credentials -d client_id=backend \
    -d client_secret=backend-secret -d scope=crosstab --data-urlencode "resource=$base" | json_field access_token)"
token="$(curl -sf "$base/v1/oauth/token" -d grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer \
    --data-urlencode "assertion=$idp_token" | json_field access_token)"
[ -n "$token" ] || { echo "no token from the token endpoint" >&2; exit 1; }
sed "s|\"$key\"|\"Bearer $token\"|" "$work/post.lua" >"$work/bearer.lua"
fi

# Server CPU (user + system, in clock ticks) the server process has used so far.
ticks() { awk '{ print $14 + $15 }' "/proc/$server_pid/stat"; }
# Idle time of all the machine's cores so far (idle + I/O wait, in clock ticks); read by
# the shell, since mawk prints a count past 2^31 (months of uptime) with an exponent.
idle_ticks() { local _c _u _n _s idle iowait _rest; read -r _c _u _n _s idle iowait _rest </proc/stat; echo $(( idle + iowait )); }
# CPU the PostgreSQL cluster's processes have used so far: the postmaster, its children
# now, and those it has reaped (an autovacuum worker may end within a run); 0 on SQLite.
db_ticks() {
    if [ -z "$postmaster" ]; then echo 0; return; fi
    {
        awk '{ print $14 + $15 + $16 + $17 }' "/proc/$postmaster/stat"
        for p in $(pgrep -P "$postmaster"); do
            awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null || true
        done
    } | awk '{ s += $1 } END { print s + 0 }'
}
# One wrk run; its output goes to $1, and over it the server's CPU to $1.cpu, the cores'
# idle time to $1.idle and the database's CPU to $1.db (read first: its processes take a
# moment to list, which the idle time should not count).
run() {
    local out="$1"; shift
    local before idle db; db="$(db_ticks)"; before="$(ticks)"; idle="$(idle_ticks)"
    wrk -t"$threads" -c"$connections" -d"${duration}s" --latency "$@" >"$out"
    echo $(( $(ticks) - before )) >"$out.cpu"
    echo $(( $(idle_ticks) - idle )) >"$out.idle"
    echo $(( $(db_ticks) - db )) >"$out.db"
}
# The ticks of $1 (cpu, idle or db) over run $2 as µs per request. Server CPU per request
# is steadier than req/s, which also counts how much of the shared cores the load
# generator took; idle cores while every connection has a request out mean the run waited
# (on the ledger's commits) rather than ran out of CPU.
per_request_us() { awk -v t="$(cat "$2.$1")" -v hz="$(getconf CLK_TCK)" '/requests in/ { printf "%.1f\n", t * 1e6 / hz / $1 }' "$2"; }
# p99 in ms from wrk's latency distribution in run $1.
p99() { awk '$1=="99%" { v=$2; if (v ~ /us$/) { sub(/us/,"",v); v/=1000 } else if (v ~ /ms$/) { sub(/ms/,"",v) } else if (v ~ /s$/) { sub(/s/,"",v); v*=1000 } print v }' "$1"; }
rps() { awk '/^Requests\/sec:/ { print $2 }' "$1"; }
# A reading of every round's run named $1: the command after it, given each run's file.
over_rounds() { local name="$1"; shift; for f in "$work"/"$name".*.txt; do "$@" "$f"; done; }
# Requests sent, and the non-2xx among them, from wrk's output.
requests() { awk '/requests in/ { print $1 }'; }
non2xx() { awk '/Non-2xx/ { n=$NF } END { print n+0 }'; }
# $1 / $2 to two places.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a/b }'; }

echo "warming up..." >&2
wrk -t1 -c8 -d2s "$base/v1/docs" >/dev/null
wrk -t1 -c8 -d2s -s "$work/post.lua" "$base/v1/crosstab" >/dev/null
if [ "$bearer" = yes ]; then wrk -t1 -c8 -d2s -s "$work/bearer.lua" "$base/v1/crosstab" >/dev/null; fi

load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
# Rounds of docs, the billed POST, the bearer call and the request mix back to back: the
# machine's speed drifts by ±10% between runs (other guests on the host), so one pair is
# a noisy ratio; the median of the rounds' ratios to their docs is the figure.
for round in $(seq 1 "$rounds"); do
    run "$work/docs.$round.txt" "$base/v1/docs"
    run "$work/post.$round.txt" -s "$work/post.lua" "$base/v1/crosstab"
    if [ "$bearer" = yes ]; then run "$work/bearer.$round.txt" -s "$work/bearer.lua" "$base/v1/crosstab"; fi
    CROSSTAB_KEY="$key" CROSSTAB_MIX_STATE="$work/mix.state" \
        run "$work/mix.$round.txt" -s "$root/scripts/bench/crosstab-mix.lua" "$base/v1/crosstab"
done
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

median() { sort -g | awk '{ v[NR]=$1 } END { if (NR%2) print v[(NR+1)/2]; else printf "%.2f\n", (v[NR/2]+v[NR/2+1])/2 }'; }
ratios=""; bearer_ratios=""; mix_ratios=""; post_total=0; post_non2xx=0; bearer_total=0; bearer_non2xx=0
mix_total=0; mix_non2xx=0
for round in $(seq 1 "$rounds"); do
    d="$(rps "$work/docs.$round.txt")"; p="$(rps "$work/post.$round.txt")"
    r="$(ratio "$p" "$d")"
    ratios="$ratios $r"
    post_total=$(( post_total + $(requests <"$work/post.$round.txt") ))
    post_non2xx=$(( post_non2xx + $(non2xx <"$work/post.$round.txt") ))
    m="$(rps "$work/mix.$round.txt")"
    mr="$(ratio "$m" "$d")"
    mix_ratios="$mix_ratios $mr"
    mix_total=$(( mix_total + $(requests <"$work/mix.$round.txt") ))
    mix_non2xx=$(( mix_non2xx + $(non2xx <"$work/mix.$round.txt") ))
    b="-"; br="-"
    if [ "$bearer" = yes ]; then
        b="$(rps "$work/bearer.$round.txt")"
        br="$(ratio "$b" "$p")"
        bearer_ratios="$bearer_ratios $br"
        bearer_total=$(( bearer_total + $(requests <"$work/bearer.$round.txt") ))
        bearer_non2xx=$(( bearer_non2xx + $(non2xx <"$work/bearer.$round.txt") ))
    fi
    printf 'round %s: GET /v1/docs %10s req/s p99 %s ms | POST /v1/crosstab %10s req/s p99 %s ms | ratio %s | bearer %10s req/s, /key %s | mix %10s req/s p99 %s ms, /docs %s\n' \
        "$round" "$d" "$(p99 "$work/docs.$round.txt")" "$p" "$(p99 "$work/post.$round.txt")" "$r" "$b" "$br" \
        "$m" "$(p99 "$work/mix.$round.txt")" "$mr"
done
bearer_rps="-"; bearer_p99="-"; bearer_ratio="-"; bearer_cpu="-"
if [ "$bearer" = yes ]; then
    bearer_rps="$(over_rounds bearer rps | median)"
    bearer_p99="$(over_rounds bearer p99 | median)"
    bearer_ratio="$(for r in $bearer_ratios; do echo "$r"; done | median)"
    bearer_cpu="$(over_rounds bearer per_request_us cpu | median)"
fi
docs_rps="$(over_rounds docs rps | median)"
post_rps="$(over_rounds post rps | median)"
docs_p99="$(over_rounds docs p99 | median)"
post_p99="$(over_rounds post p99 | median)"
post_p99_max="$(over_rounds post p99 | sort -g | tail -1)"
ratio="$(for r in $ratios; do echo "$r"; done | median)"
mix_rps="$(over_rounds mix rps | median)"
mix_p99="$(over_rounds mix p99 | median)"
mix_ratio="$(for r in $mix_ratios; do echo "$r"; done | median)"
docs_cpu="$(over_rounds docs per_request_us cpu | median)"
post_cpu="$(over_rounds post per_request_us cpu | median)"
mix_cpu="$(over_rounds mix per_request_us cpu | median)"
idle_line="$(over_rounds docs per_request_us idle | median) µs docs, $(over_rounds post per_request_us idle | median) µs POST, $(over_rounds mix per_request_us idle | median) µs request mix"
db_line="$(over_rounds post per_request_us db | median) µs POST, $(over_rounds mix per_request_us db | median) µs request mix"

kill -TERM "$server_pid"; wait "$server_pid" || true; server_pid=""
bills="$("$bin" usage --data-dir "$work/data" "${database[@]}" --format csv \
    | awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "calls") c = i; next } { s += $c } END { print s + 0 }')"
warmup_and_run_oks=$(( $(grep -c 'status=200 .*path=/v1/crosstab\|path=/v1/crosstab status=200' "$work/server.log" || true) ))
# Requests whose client went away once their bill was written (wrk's cut-off): billed,
# no 200 sent; the server logs each, so bills = 200s + these, exactly.
abandoned=$(( $(grep -c 'billed, but the client went away' "$work/server.log" || true) ))

echo "=== crosstab server benchmark on ${store} (${connections} connections, ${threads} wrk threads, ${rounds} rounds of ${duration}s each, $(nproc) cores; medians over the rounds) ==="
echo "kernel writeback    ${writeback}"
echo "guest halt polling  ${halt_poll}"
printf 'GET  /v1/docs      %10s req/s   p99 %s ms\n' "$docs_rps" "$docs_p99"
printf 'POST /v1/crosstab  %10s req/s   p99 %s ms, worst round %s ms   (%s requests, non-2xx: %s)\n' "$post_rps" "$post_p99" "$post_p99_max" "$post_total" "$post_non2xx"
printf 'POST with bearer   %10s req/s   p99 %s ms   (%s requests, non-2xx: %s; a token of this server)\n' "$bearer_rps" "$bearer_p99" "$bearer_total" "$bearer_non2xx"
printf 'POST request mix   %10s req/s   p99 %s ms   (%s requests, non-2xx: %s; no cache hits)\n' "$mix_rps" "$mix_p99" "$mix_total" "$mix_non2xx"
printf 'ratio POST/docs    %10s         (median of the rounds:%s; target >= 0.60)\n' "$ratio" "$ratios"
printf 'ratio mix/docs     %10s         (median of the rounds:%s; target >= 0.60)\n' "$mix_ratio" "$mix_ratios"
printf 'ratio bearer/key   %10s         (median of the rounds:%s; target >= 0.90)\n' "$bearer_ratio" "$bearer_ratios"
printf 'p99 POST           %10s ms      (target < 10 ms; request mix: %s ms)\n' "$post_p99" "$mix_p99"
printf 'server CPU/request %10s µs docs, %s µs POST, %s µs bearer, %s µs request mix (medians; the crosstab process only)\n' "$docs_cpu" "$post_cpu" "$bearer_cpu" "$mix_cpu"
printf 'cores idle/request %s (medians, all %s cores: time the run waited rather than computed)\n' "$idle_line" "$(nproc)"
if [ -n "$pg_bin" ]; then
    printf 'database CPU/req.  %s (medians; the PostgreSQL processes)\n' "$db_line"
fi
printf 'load average       %s before, %s after\n' "$load_before" "$load_after"
printf 'bills in ledger    %10s         (200s logged by the server: %s; client gone after the bill was written: %s)\n' "$bills" "$warmup_and_run_oks" "$abandoned"
if [ "$bills" -ne $(( warmup_and_run_oks + abandoned )) ]; then
    echo "MISMATCH: bills != 200s + abandoned" >&2
    exit 1
fi
