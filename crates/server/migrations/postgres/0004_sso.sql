-- Single sign-on. A bill is made by a key, an app user, or a bearer token vouched for by
-- an identity provider (exactly one): the token's provider and subject are recorded.
ALTER TABLE ledger ADD COLUMN idp TEXT;
ALTER TABLE ledger ADD COLUMN subject TEXT;
ALTER TABLE ledger DROP CONSTRAINT ledger_one_caller;
ALTER TABLE ledger ADD CONSTRAINT ledger_token_whole CHECK ((idp IS NULL) = (subject IS NULL));
ALTER TABLE ledger ADD CONSTRAINT ledger_one_caller CHECK (
    (key_id IS NOT NULL)::int + (user_id IS NOT NULL)::int + (idp IS NOT NULL)::int = 1
);

-- Identity providers an operator trusts. kind 'oidc': `issuer` is the issuer URL (its keys
-- come from its discovery document); kind 'saml': `issuer` is the entity id and
-- `metadata` the IdP's metadata. A token must name `audience` (NULL: the server's public
-- URL, `serve --public-url`). Its account is `account`,
-- or the account named by the claim (OIDC) or attribute (SAML) `account_claim`.
CREATE TABLE identity_providers (
    name          TEXT PRIMARY KEY,
    kind          TEXT NOT NULL CHECK (kind IN ('oidc', 'saml')),
    issuer        TEXT NOT NULL,
    audience      TEXT,
    account       TEXT,
    account_claim TEXT,
    metadata      TEXT,
    created_at    BIGINT NOT NULL,
    CHECK ((account IS NULL) <> (account_claim IS NULL)),
    CHECK ((kind = 'saml') = (metadata IS NOT NULL)),
    UNIQUE (kind, issuer, audience)
);

-- The keys this server signs its own access tokens with (Ed25519; the private key as
-- PKCS#8 DER, base64). The newest unretired key signs; a retired key still verifies the
-- tokens it signed until they expire.
CREATE TABLE signing_keys (
    kid         TEXT PRIMARY KEY,
    private_key TEXT NOT NULL,
    public_key  TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    retired_at  BIGINT
);

-- SAML assertion ids already exchanged, kept until the assertion expires (replay check).
CREATE TABLE saml_assertions_used (
    idp        TEXT NOT NULL,
    id         TEXT NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (idp, id)
);
CREATE INDEX saml_assertions_used_expiry ON saml_assertions_used (expires_at);
