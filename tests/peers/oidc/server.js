// A local OpenID Provider for Agentloom's OAuth tests (node-oidc-provider 9.x).
// Usage: node server.js PORT [ACCESS_TOKEN_TTL_SECONDS]
// Binds 127.0.0.1 only. Prints "listening <issuer>" once ready.
import Provider from 'oidc-provider';

const port = Number(process.argv[2] || 0);
const accessTtl = Number(process.argv[3] || 3600);
if (!Number.isInteger(port) || port <= 0) {
  console.error('usage: node server.js PORT [ACCESS_TOKEN_TTL_SECONDS]');
  process.exit(2);
}
const issuer = `http://127.0.0.1:${port}`;

const provider = new Provider(issuer, {
  clients: [{
    client_id: 'agentloom-test',
    client_name: 'Agentloom tests',
    application_type: 'native',
    token_endpoint_auth_method: 'none',
    redirect_uris: ['http://127.0.0.1/callback'],
    grant_types: ['authorization_code', 'refresh_token', 'urn:ietf:params:oauth:grant-type:device_code'],
    response_types: ['code'],
  }],
  pkce: { required: () => true },
  rotateRefreshToken: true,
  issueRefreshToken: async (ctx, client) => client.grantTypeAllowed('refresh_token'),
  features: {
    devInteractions: { enabled: true },
    deviceFlow: { enabled: true },
    revocation: { enabled: true },
  },
  scopes: ['openid', 'offline_access', 'profile', 'repo'],
  ttl: {
    AccessToken: accessTtl,
    AuthorizationCode: 60,
    DeviceCode: 600,
    Grant: 3600,
    IdToken: 3600,
    Interaction: 600,
    RefreshToken: 86400,
    Session: 3600,
  },
  findAccount: async (ctx, id) => ({
    accountId: id,
    claims: async () => ({ sub: id }),
  }),
});
provider.proxy = false;
provider.on('server_error', (ctx, err) => console.error('server_error', err));

const server = provider.listen(port, '127.0.0.1', () => {
  console.log(`listening ${issuer}`);
});
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
