#!/usr/bin/env bash
# Makes a new PostgreSQL cluster's WAL look like a running one's before a benchmark.
#
# A new cluster has no old WAL segments to recycle: under load it creates (writes 16 MB of
# zeros and flushes) a new one for every 16 MB of WAL, about every 2 s at ~30k bills/s,
# and each stalls the commits waiting behind it by 12-50 ms. A cluster that has been
# running renames old segments instead. This makes and recycles 64 segments (1 GB, the
# default max_wal_size) in ~2 s. deploy/README.md says what an operator sets for the same.
#
# Usage: scripts/bench/pg-wal-warmup.sh PG_BIN_DIR PORT   (user crosstab, database postgres)
set -euo pipefail
pg_bin="$1"
port="$2"
psql() { "$pg_bin/psql" -qAt -h 127.0.0.1 -p "$port" -U crosstab -d postgres "$@" >/dev/null; }
for _ in $(seq 64); do
    echo "CREATE TABLE wal_warmup (); DROP TABLE wal_warmup; SELECT pg_switch_wal();"
done | psql
psql -c CHECKPOINT
