-- A bill is made by a key or by an app user signed in to the account (exactly one), so
-- usage can say who ran a query.
ALTER TABLE ledger ALTER COLUMN key_id DROP NOT NULL;
ALTER TABLE ledger ADD COLUMN user_id BIGINT REFERENCES users (id);
ALTER TABLE ledger ADD CONSTRAINT ledger_one_caller CHECK ((key_id IS NULL) <> (user_id IS NULL));

-- With `serve --upstream URL`, the key the app backend presents upstream for each
-- account's users (a credential for another service, so it is kept as given).
CREATE TABLE upstream_keys (
    account_id BIGINT PRIMARY KEY REFERENCES accounts (id),
    api_key    TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);

-- An account's request rate (per second, over all its keys, users and tokens) and daily
-- quota of billed calls; NULL: not limited.
CREATE TABLE account_limits (
    account_id  BIGINT PRIMARY KEY REFERENCES accounts (id),
    per_second  INTEGER,
    daily_quota BIGINT
);

-- Idempotency-Key: a key an account sent with a crosstab, the SHA-256 of that body, and
-- once billed, the 200 it got (written in the bill's own transaction). A row without a
-- status is a request still being answered.
CREATE TABLE idempotency_keys (
    account_id   BIGINT NOT NULL REFERENCES accounts (id),
    key          TEXT NOT NULL,
    body_sha256  TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    status       INTEGER,
    response     BYTEA,
    PRIMARY KEY (account_id, key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);

-- Compiled surveys shared by every server: content-addressed blobs in 8 MiB chunks, and
-- which blob each survey code serves now. Servers copy a blob into their local data dir
-- (checked against its SHA-256) and map their own copy.
CREATE TABLE survey_blobs (
    sha256 TEXT NOT NULL,
    seq    INTEGER NOT NULL,
    chunk  BYTEA NOT NULL,
    PRIMARY KEY (sha256, seq)
);
CREATE TABLE surveys (
    code         TEXT PRIMARY KEY,
    sha256       TEXT NOT NULL,
    bytes        BIGINT NOT NULL,
    published_at BIGINT NOT NULL
);
