-- Accounts, their survey grants, their API keys, and the ledger of billed calls.
CREATE TABLE accounts (
    id         INTEGER PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL
);

-- grp = '*' grants the whole survey; otherwise one authorization group.
CREATE TABLE grants (
    account_id INTEGER NOT NULL REFERENCES accounts (id),
    survey     TEXT NOT NULL,
    grp        TEXT NOT NULL,
    PRIMARY KEY (account_id, survey, grp)
);

-- Only the SHA-256 of a key's secret is stored (hex).
CREATE TABLE api_keys (
    id          TEXT PRIMARY KEY,
    account_id  INTEGER NOT NULL REFERENCES accounts (id),
    env         TEXT NOT NULL,
    secret_hash TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT,
    revoked_at  BIGINT
);
CREATE INDEX api_keys_account ON api_keys (account_id);

-- Bumped by every change to keys or grants, so servers know to drop cached keys.
CREATE TABLE key_revision (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    revision BIGINT NOT NULL
);
INSERT INTO key_revision (id, revision) VALUES (1, 0);

-- One row per billed (HTTP 200) crosstab call. Times are Unix milliseconds.
CREATE TABLE ledger (
    id         INTEGER PRIMARY KEY,
    at         BIGINT NOT NULL,
    account_id INTEGER NOT NULL REFERENCES accounts (id),
    key_id     TEXT NOT NULL,
    survey     TEXT NOT NULL,
    grp        TEXT,
    base       TEXT NOT NULL,
    targets    INTEGER NOT NULL,
    request_id TEXT NOT NULL
);
CREATE INDEX ledger_account_at ON ledger (account_id, at);
