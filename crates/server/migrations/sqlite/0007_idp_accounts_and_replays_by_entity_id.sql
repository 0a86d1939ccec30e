-- The accounts an identity provider whose tokens name their account (by a claim or an
-- attribute) may name: any other is refused. A provider of that kind added before this
-- table names none until the operator allows them (`crosstab sso allow-account`).
CREATE TABLE identity_provider_accounts (
    idp     TEXT NOT NULL REFERENCES identity_providers (name) ON DELETE CASCADE,
    account TEXT NOT NULL,
    PRIMARY KEY (idp, account)
);
