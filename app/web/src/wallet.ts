// Who signs: a local keypair on localnet (handed to the page in its settings, never on a real
// cluster), or a wallet through Wallet Standard (`solana:signTransaction`), adapted to kit's
// partial signer so the client's `postTask` signs through it like any signer.

import {
  createKeyPairSignerFromBytes,
  getPublicKeyFromAddress,
  verifySignature,
  getTransactionDecoder,
  getTransactionEncoder,
  type Address,
  type TransactionPartialSigner,
  type TransactionSigner,
} from '@solana/kit';
import { getWallets } from '@wallet-standard/app';

/** A signer and how it was found. */
export interface Signer {
  signer: TransactionSigner;
  label: string;
}

/** The localnet keypair (64 bytes, as `solana-keygen` writes it). */
export async function localSigner(secret: number[]): Promise<Signer> {
  if (!Array.isArray(secret) || secret.length !== 64) throw new Error('the local keypair must be 64 bytes (a solana-keygen file)');
  return { signer: await createKeyPairSignerFromBytes(Uint8Array.from(secret)), label: 'local keypair (localnet)' };
}

/** Genesis hashes of the public clusters. */
export const GENESIS = {
  mainnet: '5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d',
  devnet: 'EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG',
  testnet: '4uhcVJyU9pJkvQyS88uRDiswHXSCkY3zQawwpjk2NsNY',
} as const;

/** The chain id Wallet Standard names for a cluster, from its genesis hash (not its URL: any
 * host can front any cluster). */
export function chainOf(genesis: string): string {
  const name = (Object.keys(GENESIS) as (keyof typeof GENESIS)[]).find((k) => GENESIS[k] === genesis);
  return `solana:${name ?? 'localnet'}`;
}

/** The first Wallet Standard wallet that can sign Solana transactions, connected. What it
 * returns is checked: one signed transaction per request, its message the one sent (a wallet
 * that changes the transaction is refused by name, not sent), and a valid signature by the
 * connected account. */
export async function standardSigner(genesis: string): Promise<Signer> {
  const wallets = getWallets()
    .get()
    .filter((w) => 'standard:connect' in w.features && 'solana:signTransaction' in w.features);
  if (wallets.length === 0) {
    throw new Error('No wallet: install a Solana wallet that supports Wallet Standard (or, on localnet, start the page with scripts/app, which hands it a local keypair)');
  }
  const wallet = wallets[0];
  const features = wallet.features as Record<string, any>;
  const { accounts } = await features['standard:connect'].connect();
  const account = accounts[0];
  if (!account) throw new Error(`${wallet.name} connected no account`);
  const chain = chainOf(genesis);
  if (Array.isArray(account.chains) && account.chains.length > 0 && !account.chains.includes(chain)) {
    throw new Error(`${wallet.name}'s account is for ${account.chains.join(', ')}, this cluster is ${chain}`);
  }
  const me = account.address as Address;
  const key = await getPublicKeyFromAddress(me);
  const signer: TransactionPartialSigner = {
    address: me,
    async signTransactions(txs) {
      const inputs = txs.map((tx) => ({ account, chain, transaction: new Uint8Array(getTransactionEncoder().encode(tx)) }));
      const outs: { signedTransaction: Uint8Array }[] = await features['solana:signTransaction'].signTransaction(...inputs);
      if (!Array.isArray(outs) || outs.length !== txs.length) throw new Error(`${wallet.name} returned ${outs?.length} transactions for ${txs.length}`);
      return Promise.all(
        outs.map(async (o, i) => {
          const signed = getTransactionDecoder().decode(o.signedTransaction);
          const sent = txs[i].messageBytes;
          if (signed.messageBytes.length !== sent.length || signed.messageBytes.some((b, j) => b !== sent[j])) {
            throw new Error(`${wallet.name} changed the transaction before signing it: refused, nothing was sent`);
          }
          const sig = signed.signatures[me];
          if (!sig) throw new Error(`${wallet.name} returned the transaction unsigned`);
          if (!(await verifySignature(key, sig, sent))) throw new Error(`${wallet.name}'s signature does not verify for ${me}`);
          return { [me]: sig } as any;
        }),
      );
    },
  };
  return { signer, label: `${wallet.name} (Wallet Standard)` };
}
