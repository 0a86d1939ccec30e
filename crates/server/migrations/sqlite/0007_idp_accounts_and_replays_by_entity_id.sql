-- The accounts an identity provider whose tokens name their account (by a claim or an
-- attribute) may name: any other is refused. A provider of that kind added before this
-- table names none until the operator allows them (`crosstab sso allow-account`).
CREATE TABLE identity_provider_accounts (
    idp     TEXT NOT NULL REFERENCES identity_providers (name) ON DELETE CASCADE,
    account TEXT NOT NULL,
    PRIMARY KEY (idp, account)
);

-- Used SAML assertions are kept by their provider's entity id, which outlives the name
-- the provider has here (removed and added again under another name, its assertions
-- stay used): the rows of the providers configured now move to their entity ids.
INSERT INTO saml_assertions_used (idp, id, expires_at)
    SELECT p.issuer, u.id, u.expires_at
    FROM saml_assertions_used u JOIN identity_providers p ON p.name = u.idp AND p.kind = 'saml'
    ON CONFLICT DO NOTHING;
DELETE FROM saml_assertions_used
    WHERE idp IN (SELECT name FROM identity_providers WHERE kind = 'saml')
    AND idp NOT IN (SELECT issuer FROM identity_providers);

-- A user an operator disabled (`crosstab user disable`): no sign-in, no session; kept,
-- as the ledger's bills name it. `user create` with a new password enables it again.
ALTER TABLE users ADD COLUMN disabled_at BIGINT;
