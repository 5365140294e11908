import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

// The generated client reads process.env.NODE_ENV (for Codama's error messages): defined for
// the browser; the page names errors from the IDL itself (src/generated/eventsIdl.ts).
export default defineConfig(({ mode }) => ({
  // the client package from its source in this workspace (its package entry is the built dist/)
  resolve: { alias: { '@compute-market/client': fileURLToPath(new URL('../client/src/index.ts', import.meta.url)) } },
  define: { 'process.env.NODE_ENV': JSON.stringify(mode === 'production' ? 'production' : 'development') },
  build: { target: 'es2022', chunkSizeWarningLimit: 1024 },
  server: { host: '127.0.0.1' },
  preview: { host: '127.0.0.1' },
}));
