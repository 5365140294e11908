// A scripted RPC node for the tests: each method answers from `answers` (a function of the
// call's arguments), and every call is recorded.

export function scripted(answers: Record<string, (...args: any[]) => unknown>) {
  const calls: { method: string; args: any[] }[] = [];
  const rpc = new Proxy(
    {},
    {
      get: (_, method: string) =>
        (...args: any[]) => {
          calls.push({ method, args });
          const answer = answers[method];
          if (!answer) throw new Error(`unexpected RPC call ${method}`);
          return { send: async () => answer(...args) };
        },
    },
  ) as any;
  return { rpc, calls };
}

/** A recent blockhash as `getLatestBlockhash` returns it. */
export const BLOCKHASH = { value: { blockhash: '11111111111111111111111111111111', lastValidBlockHeight: 100n } };
