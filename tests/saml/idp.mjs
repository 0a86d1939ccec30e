// A SAML 2.0 identity provider for the server's tests: samlify (with xml-crypto underneath)
// signs every assertion; this script only fills the templates and, for the attacks, moves
// signed XML around as an attacker would. Prints one JSON object on stdout:
//   { "metadata": "<EntityDescriptor ...>", "entity_id": "...", "assertions": { case: xml } }
//
// usage: node idp.mjs '{"entity_id": "...", "audience": "...", "subject": "...",
//                       "account": "...", "now": <unix s>, "lifetime": <s>,
//                       "other_accounts": ["...", ...]}'
//
// The keys are made at each run with openssl (self-signed, test-only, thrown away).
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import samlify from 'samlify';
import { SignedXml } from 'xml-crypto';

const { SamlLib, Constants } = samlify;

// The IdP only signs; nothing here parses a SAML message, so no schema validation is due.
samlify.setSchemaValidator({ validate: async () => 'skipped' });

const params = JSON.parse(process.argv[2] ?? '{}');
const entityId = params.entity_id ?? 'https://idp.test/saml';
const audience = params.audience ?? 'https://crosstab.test';
const subject = params.subject ?? 'ada@example.org';
const account = params.account ?? 'acme';
const now = params.now ?? Math.floor(Date.now() / 1000);
const lifetime = params.lifetime ?? 300;
// Other accounts to sign a valid assertion for, with the same key (cases `valid_for_<account>`).
const otherAccounts = params.other_accounts ?? [];

/** A throwaway RSA key and self-signed certificate (PEM strings). */
function keyPair(cn) {
  const dir = mkdtempSync(join(tmpdir(), 'crosstab-saml-'));
  try {
    execFileSync('openssl', [
      'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-sha256', '-days', '2',
      '-subj', `/CN=${cn}`, '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem'),
    ], { stdio: ['ignore', 'ignore', 'pipe'] });
    return {
      key: readFileSync(join(dir, 'key.pem'), 'utf8'),
      cert: readFileSync(join(dir, 'cert.pem'), 'utf8'),
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const idpKeys = keyPair('crosstab test IdP');
const attackerKeys = keyPair('crosstab test attacker');

const idp = samlify.IdentityProvider({
  entityID: entityId,
  privateKey: idpKeys.key,
  signingCert: idpKeys.cert,
  nameIDFormat: [Constants.namespace.format.emailAddress],
  singleSignOnService: [{ Binding: Constants.namespace.binding.post, Location: `${entityId}/sso` }],
  singleLogoutService: [{ Binding: Constants.namespace.binding.post, Location: `${entityId}/slo` }],
});

const iso = (unix) => new Date(unix * 1000).toISOString();

// The assertion of samlify's login response template, standing alone (RFC 7522 sends the
// assertion itself), with an attribute statement naming the account.
const ASSERTION = '<saml:Assertion xmlns:saml="urn:oasis:names:tc:SAML:2.0:assertion" ID="{ID}" Version="2.0" IssueInstant="{IssueInstant}">'
  + '<saml:Issuer>{Issuer}</saml:Issuer>'
  + '<saml:Subject>{NameIDElement}<saml:SubjectConfirmation Method="{Method}"><saml:SubjectConfirmationData NotOnOrAfter="{SubjectConfirmationDataNotOnOrAfter}" Recipient="{Recipient}"/></saml:SubjectConfirmation></saml:Subject>'
  + '<saml:Conditions NotBefore="{NotBefore}" NotOnOrAfter="{NotOnOrAfter}"><saml:AudienceRestriction><saml:Audience>{Audience}</saml:Audience></saml:AudienceRestriction></saml:Conditions>'
  + '<saml:AuthnStatement AuthnInstant="{IssueInstant}"><saml:AuthnContext><saml:AuthnContextClassRef>urn:oasis:names:tc:SAML:2.0:ac:classes:PasswordProtectedTransport</saml:AuthnContextClassRef></saml:AuthnContext></saml:AuthnStatement>'
  + '<saml:AttributeStatement><saml:Attribute Name="account"><saml:AttributeValue>{Account}</saml:AttributeValue></saml:Attribute><saml:Attribute Name="groups"><saml:AttributeValue>analysts</saml:AttributeValue><saml:AttributeValue>staff</saml:AttributeValue></saml:Attribute></saml:AttributeStatement>'
  + '</saml:Assertion>';

let counter = 0;
/** An unsigned assertion; `changes` overrides the template's values. */
function assertion(changes = {}) {
  counter += 1;
  const values = {
    ID: `_a${now}x${counter}${Math.random().toString(16).slice(2)}`,
    IssueInstant: iso(now),
    Issuer: entityId,
    NameID: subject,
    Method: 'urn:oasis:names:tc:SAML:2.0:cm:bearer',
    SubjectConfirmationDataNotOnOrAfter: iso(now + lifetime),
    Recipient: `${audience}/v1/oauth/token`,
    NotBefore: iso(now - 5),
    NotOnOrAfter: iso(now + lifetime),
    Audience: audience,
    Account: account,
    ...changes,
  };
  const nameId = values.NameID === null
    ? ''
    : `<saml:NameID Format="${Constants.namespace.format.emailAddress}">{NameID}</saml:NameID>`;
  const template = ASSERTION.replace('{NameIDElement}', nameId);
  return SamlLib.replaceTagsByValue(template, values);
}

const ROOT_ASSERTION = "/*[local-name(.)='Assertion']";
const AFTER_ISSUER = { reference: "/*[local-name(.)='Assertion']/*[local-name(.)='Issuer']", action: 'after' };

/** `xml` with its root Assertion signed enveloped (exclusive c14n, RSA-SHA256 unless
 * `algorithm` says otherwise) by `keys`. */
function sign(xml, keys = idpKeys, algorithm = undefined) {
  return SamlLib.constructSAMLSignature({
    rawSamlMessage: xml,
    signatureAlgorithm: algorithm,
    referenceTagXPath: ROOT_ASSERTION,
    privateKey: keys.key,
    signingCert: keys.cert.replace(/-----[A-Z ]+-----|\s/g, ''),
    isBase64Output: false,
    signatureConfig: {
      prefix: 'ds',
      location: AFTER_ISSUER,
    },
  });
}

/** Key confusion: `xml` "signed" with HMAC-SHA1 keyed by the IdP's public certificate, as
 * a verifier that takes the algorithm from the document would check it. */
function hmacWithCertificate(xml) {
  const signer = new SignedXml({
    privateKey: Buffer.from(idpKeys.cert),
    signatureAlgorithm: 'http://www.w3.org/2000/09/xmldsig#hmac-sha1',
    canonicalizationAlgorithm: 'http://www.w3.org/2001/10/xml-exc-c14n#',
  });
  signer.enableHMAC();
  signer.addReference({
    xpath: ROOT_ASSERTION,
    transforms: [
      'http://www.w3.org/2000/09/xmldsig#enveloped-signature',
      'http://www.w3.org/2001/10/xml-exc-c14n#',
    ],
    digestAlgorithm: 'http://www.w3.org/2001/04/xmlenc#sha256',
  });
  signer.computeSignature(xml, { prefix: 'ds', location: AFTER_ISSUER });
  return signer.getSignedXml();
}

const valid = sign(assertion());
const idOf = (xml) => /<saml:Assertion [^>]*\bID="([^"]+)"/.exec(xml)[1];
const signatureOf = (xml) => /<ds:Signature[\s\S]*<\/ds:Signature>/.exec(xml)[0];
const withoutDeclaration = (xml) => xml.replace(/^<\?xml[^>]*\?>/, '');

// Signature wrapping: the signed assertion kept somewhere the verifier might look past,
// an evil one (another subject and account) where the reader looks.
const evilChanges = { NameID: 'mallory@evil.test', Account: 'victim' };
const wrapped = {
  // XSW1-like: the evil assertion carries the signed one (in Advice) and its signature.
  wrapped_advice: assertion(evilChanges).replace(
    '</saml:Conditions>',
    `</saml:Conditions><saml:Advice>${withoutDeclaration(valid)}</saml:Advice>`,
  ),
  // The evil assertion takes the signed one's ID and signature; the signed one hides inside
  // it, so an ID lookup may find either.
  wrapped_same_id: assertion({ ...evilChanges, ID: idOf(valid) }).replace(
    '</saml:Issuer>',
    `</saml:Issuer>${signatureOf(valid).replace('</ds:Signature>', `<ds:Object>${withoutDeclaration(valid)}</ds:Object></ds:Signature>`)}`,
  ),
  // The signature moved to an evil assertion of its own ID; the signed one left out.
  wrapped_moved_signature: assertion(evilChanges).replace('</saml:Issuer>', `</saml:Issuer>${signatureOf(valid)}`),
  // A response with the evil assertion first and the signed one after it.
  wrapped_response: '<samlp:Response xmlns:samlp="urn:oasis:names:tc:SAML:2.0:protocol" ID="_r1" Version="2.0" IssueInstant="'
    + `${iso(now)}"><saml:Issuer xmlns:saml="urn:oasis:names:tc:SAML:2.0:assertion">${entityId}</saml:Issuer>`
    + '<samlp:Status><samlp:StatusCode Value="urn:oasis:names:tc:SAML:2.0:status:Success"/></samlp:Status>'
    + `${assertion(evilChanges)}${withoutDeclaration(valid)}</samlp:Response>`,
};

/** A login response as samlify's IdP makes it, to an SP with `wants` whose assertion
 * consumer is the token endpoint (the confirmation's Recipient, as RFC 7522 asks). */
async function loginResponse(wants) {
  const to = samlify.ServiceProvider({
    entityID: audience,
    assertionConsumerService: [{ Binding: Constants.namespace.binding.post, Location: `${audience}/v1/oauth/token` }],
    ...wants,
  });
  const made = await idp.createLoginResponse(
    to,
    { extract: { request: { id: '_request1' } } },
    'post',
    { email: subject },
  );
  return Buffer.from(made.context, 'base64').toString('utf8');
}

const cases = {
  valid,
  // The assertion signed inside the response; then both signed; then only the response.
  valid_response: await loginResponse({ wantAssertionsSigned: true }),
  valid_response_both_signed: await loginResponse({ wantAssertionsSigned: true, wantMessageSigned: true }),
  response_signed_only: await loginResponse({ wantAssertionsSigned: false, wantMessageSigned: true }),
  // A comment does not count in exclusive c14n, so the signature still holds: the subject
  // read must be the whole NameID, not the text before the comment.
  comment_in_name_id: sign(assertion({ NameID: `${subject}.evil.test` }))
    .replace(`>${subject}.evil.test<`, `>${subject}<!---->.evil.test<`),
  unsigned: assertion(),
  tampered: valid.replace(`>${subject}<`, '>mallory@evil.test<'),
  ...wrapped,
  resigned: sign(assertion(evilChanges), attackerKeys),
  sha1: sign(assertion(), idpKeys, 'http://www.w3.org/2000/09/xmldsig#rsa-sha1'),
  hmac_with_certificate: hmacWithCertificate(assertion(evilChanges)),
  expired: sign(assertion({
    NotBefore: iso(now - 2 * lifetime),
    NotOnOrAfter: iso(now - lifetime),
    SubjectConfirmationDataNotOnOrAfter: iso(now - lifetime),
  })),
  confirmation_expired: sign(assertion({ SubjectConfirmationDataNotOnOrAfter: iso(now - 120) })),
  not_yet_valid: sign(assertion({ NotBefore: iso(now + lifetime) })),
  wrong_audience: sign(assertion({ Audience: 'https://elsewhere.test' })),
  wrong_recipient: sign(assertion({ Recipient: `${audience}/acs` })),
  wrong_issuer: sign(assertion({ Issuer: 'https://other-idp.test/saml' })),
  unknown_condition: sign(assertion().replace(
    '</saml:AudienceRestriction>',
    '</saml:AudienceRestriction><saml:Condition xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xmlns:x="urn:example:conditions" xsi:type="x:OnlyOnTuesdays"/>',
  )),
  not_bearer: sign(assertion({ Method: 'urn:oasis:names:tc:SAML:2.0:cm:holder-of-key' })),
  no_name_id: sign(assertion({ NameID: null })),
  control_in_name_id: sign(assertion({ NameID: 'ada\u0085@example.org' })),
};
for (const other of otherAccounts) cases[`valid_for_${other}`] = sign(assertion({ Account: other }));

process.stdout.write(JSON.stringify({
  entity_id: entityId,
  metadata: idp.getMetadata(),
  attacker_cert: attackerKeys.cert,
  assertions: cases,
}));
