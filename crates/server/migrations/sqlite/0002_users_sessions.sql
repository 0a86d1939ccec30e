-- People who sign in to the app and the portal (argon2 password hashes), and their
-- server-side sessions (only a SHA-256 of the cookie's token is stored).
CREATE TABLE users (
    id              INTEGER PRIMARY KEY,
    username        TEXT NOT NULL UNIQUE,
    account_id      INTEGER NOT NULL REFERENCES accounts (id),
    password_hash   TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    failed_logins   INTEGER NOT NULL DEFAULT 0,
    locked_until    BIGINT
);

CREATE TABLE sessions (
    token_hash  TEXT PRIMARY KEY,
    user_id     INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL
);
CREATE INDEX sessions_expiry ON sessions (expires_at);
