// Who signs: a local keypair on localnet (handed to the page in its settings, never on a real
// cluster), or a wallet through Wallet Standard (`solana:signTransaction`), adapted to kit's
// partial signer so the client's `postTask` signs through it like any signer.

import {
  createKeyPairSignerFromBytes,
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

/** The chain id Wallet Standard names for a cluster URL. */
export function chainOf(rpc: string): string {
  if (rpc.includes('devnet')) return 'solana:devnet';
  if (rpc.includes('testnet')) return 'solana:testnet';
  if (rpc.includes('127.0.0.1') || rpc.includes('localhost')) return 'solana:localnet';
  return 'solana:mainnet';
}

/** The first Wallet Standard wallet that can sign Solana transactions, connected. */
export async function standardSigner(rpc: string): Promise<Signer> {
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
  const chain = chainOf(rpc);
  const signer: TransactionPartialSigner = {
    address: account.address as Address,
    async signTransactions(txs) {
      const inputs = txs.map((tx) => ({ account, chain, transaction: new Uint8Array(getTransactionEncoder().encode(tx)) }));
      const outs: { signedTransaction: Uint8Array }[] = await features['solana:signTransaction'].signTransaction(...inputs);
      return outs.map((o) => {
        const signed = getTransactionDecoder().decode(o.signedTransaction);
        const sig = signed.signatures[account.address as Address];
        if (!sig) throw new Error(`${wallet.name} returned the transaction unsigned`);
        return { [account.address]: sig } as any;
      });
    },
  };
  return { signer, label: `${wallet.name} (Wallet Standard)` };
}
