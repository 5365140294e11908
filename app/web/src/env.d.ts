// The generated client reads process.env.NODE_ENV; Vite defines it (vite.config.ts).
declare const process: { env: Record<string, string | undefined> };
