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
