// Shared by the client tests: a free loopback port and waiting for a server's /health.
import net from 'node:net';

/** A TCP port free on 127.0.0.1 right now (the OS picks it; closed again before returning). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

/** Resolves once `${base}/health` answers 200; throws after `tries` × 100 ms. */
export async function waitHealthy(base, tries = 600) {
  for (let i = 0; i < tries; i++) {
    try {
      const r = await fetch(`${base}/health`);
      if (r.ok) return;
    } catch {}
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${base} did not become healthy`);
}
