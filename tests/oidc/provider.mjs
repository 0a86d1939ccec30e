// A real OpenID provider (oidc-provider, OpenID certified) on a loopback port, for the
// server's SSO tests. Prints one JSON line, {"issuer": "http://127.0.0.1:PORT"}, once it
// listens; stops on SIGTERM or when stdin closes.
//
// Clients (client_secret_post), both for client_credentials with a resource indicator,
// which gets a JWT access token whose `aud` is the resource:
//   backend / backend-secret   its tokens carry crosstab_account = "acme"
//   stranger / stranger-secret its tokens carry crosstab_account = "nosuch"
//   webapp / webapp-secret     an ID token is minted for it by POST /test/id-token
//
// Test routes beside the provider (never part of a real deployment):
//   POST /test/id-token {sub, client_id}        an ID token, by the provider's IdToken model
//   POST /test/sign {header, claims}            claims signed with the provider's own key
//                                               of header.alg (RS256, ES256 or EdDSA)
//   POST /test/hs256-public {claims}            HS256 with the RSA public key (PEM) as
//                                               the secret, kid of the RSA key
//   POST /test/rotate                           new keys (the JWKS serves only them)
//   GET  /test/keys                             the public JWKS, as the provider serves it
import http from 'node:http';
import crypto from 'node:crypto';
import { once } from 'node:events';
import Provider from 'oidc-provider';
import * as jose from 'jose';

const ALGORITHMS = ['RS256', 'ES256', 'EdDSA'];

async function makeKeys() {
  const keys = [];
  for (const alg of ALGORITHMS) {
    const { privateKey } = await jose.generateKeyPair(alg, { extractable: true, crv: alg === 'EdDSA' ? 'Ed25519' : undefined });
    const jwk = await jose.exportJWK(privateKey);
    jwk.kid = `${alg.toLowerCase()}-${crypto.randomBytes(6).toString('hex')}`;
    jwk.alg = alg;
    jwk.use = 'sig';
    keys.push(jwk);
  }
  return keys;
}

function clientAccount(client) {
  return client?.crosstab_account ?? client?.crosstabAccount;
}

function makeProvider(issuer, keys) {
  const provider = new Provider(issuer, {
    clients: [
      { client_id: 'backend', client_secret: 'backend-secret', grant_types: ['client_credentials'], redirect_uris: [], response_types: [], token_endpoint_auth_method: 'client_secret_post', crosstab_account: 'acme' },
      { client_id: 'stranger', client_secret: 'stranger-secret', grant_types: ['client_credentials'], redirect_uris: [], response_types: [], token_endpoint_auth_method: 'client_secret_post', crosstab_account: 'nosuch' },
      { client_id: 'webapp', client_secret: 'webapp-secret', grant_types: ['authorization_code'], redirect_uris: ['http://127.0.0.1/callback'], response_types: ['code'], token_endpoint_auth_method: 'client_secret_post' },
    ],
    extraClientMetadata: { properties: ['crosstab_account'] },
    jwks: { keys },
    features: {
      clientCredentials: { enabled: true },
      devInteractions: { enabled: false },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => undefined,
        useGrantedResource: () => true,
        getResourceServerInfo: (_ctx, resource) => ({
          scope: 'crosstab',
          audience: resource,
          accessTokenFormat: 'jwt',
          accessTokenTTL: 300,
          jwt: { sign: { alg: 'RS256' } },
        }),
      },
    },
    extraTokenClaims: async (ctx) => {
      const account = clientAccount(ctx.oidc.client);
      return account ? { crosstab_account: account } : undefined;
    },
    scopes: ['openid', 'crosstab'],
  });
  provider.proxy = false;
  return provider;
}

async function body(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const text = Buffer.concat(chunks).toString('utf8');
  return text ? JSON.parse(text) : {};
}

function send(res, status, value) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(value));
}

let keys = await makeKeys();
let provider;
let callback;
const server = http.createServer(async (req, res) => {
  try {
    const url = new URL(req.url, 'http://localhost');
    if (req.method === 'POST' && url.pathname === '/test/id-token') {
      const { sub, client_id: clientId } = await body(req);
      const client = await provider.Client.find(clientId);
      if (!client) return send(res, 404, { error: 'no such client' });
      const token = new provider.IdToken({ sub }, { client });
      token.scope = 'openid';
      return send(res, 200, { id_token: await token.issue({ use: 'idtoken' }) });
    }
    if (req.method === 'POST' && url.pathname === '/test/sign') {
      const { header, claims } = await body(req);
      const jwk = keys.find((k) => k.alg === header.alg);
      if (!jwk) return send(res, 400, { error: `no ${header.alg} key` });
      const key = await jose.importJWK(jwk, jwk.alg);
      const token = await new jose.SignJWT(claims).setProtectedHeader({ kid: jwk.kid, ...header }).sign(key);
      return send(res, 200, { token });
    }
    if (req.method === 'POST' && url.pathname === '/test/hs256-public') {
      const { claims } = await body(req);
      const rsa = keys.find((k) => k.alg === 'RS256');
      const { d, p, q, dp, dq, qi, ...publicJwk } = rsa;
      const pem = crypto.createPublicKey({ key: publicJwk, format: 'jwk' }).export({ type: 'spki', format: 'pem' });
      const token = await new jose.SignJWT(claims)
        .setProtectedHeader({ alg: 'HS256', kid: rsa.kid })
        .sign(new TextEncoder().encode(pem));
      return send(res, 200, { token });
    }
    if (req.method === 'POST' && url.pathname === '/test/rotate') {
      keys = await makeKeys();
      provider = makeProvider(issuer, keys);
      callback = provider.callback();
      return send(res, 200, { kids: keys.map((k) => k.kid) });
    }
    return callback(req, res);
  } catch (error) {
    return send(res, 500, { error: String(error?.stack ?? error) });
  }
});
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1');
await once(server, 'listening');
const issuer = `http://127.0.0.1:${server.address().port}`;
provider = makeProvider(issuer, keys);
callback = provider.callback();
process.stdout.write(`${JSON.stringify({ issuer })}\n`);

const stop = () => { server.close(); server.closeAllConnections(); process.exit(0); };
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
process.stdin.on('end', stop);
process.stdin.resume();
