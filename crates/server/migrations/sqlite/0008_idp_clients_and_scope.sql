-- The OAuth clients whose tokens an OpenID Connect provider's are accepted from (by the
-- token's `azp` or `client_id`), when the operator names any: an audience shared by many
-- of the provider's applications then lets only these call. And the scope its tokens
-- must hold, if any.
CREATE TABLE identity_provider_clients (
    idp    TEXT NOT NULL REFERENCES identity_providers (name) ON DELETE CASCADE,
    client TEXT NOT NULL,
    PRIMARY KEY (idp, client)
);
ALTER TABLE identity_providers ADD COLUMN required_scope TEXT;
