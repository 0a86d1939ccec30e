-- Failed sign-ins for names that have no user, by the name's SHA-256 (hex): counted and
-- locked as a user's are, in the database every server shares, so that neither the lock
-- nor the count it takes tells whether a name exists, however many servers answer.
-- A count (a name's or a user's) starts again a day after its last attempt.
CREATE TABLE unknown_name_attempts (
    name_key     TEXT PRIMARY KEY,
    failures     BIGINT NOT NULL,
    locked_until BIGINT,
    last_at      BIGINT NOT NULL
);
CREATE INDEX unknown_name_attempts_last_at ON unknown_name_attempts (last_at);
ALTER TABLE users ADD COLUMN last_attempt_at BIGINT;
