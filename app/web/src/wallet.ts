// Who signs: a local keypair on localnet (handed to the page in its settings, never on a real
// cluster), or any Wallet Standard wallet the person picks from the chooser. A wallet is
// adapted to kit's signers, so the client signs through it like any signer:
// - one that offers `solana:signAndSendTransaction` signs and sends for itself (a
//   `TransactionSendingSigner`): it is trusted to send what it was given, as the standard
//   says, and the page confirms the signature on chain;
// - otherwise `solana:signTransaction` (a `TransactionModifyingSigner`): what comes back is
//   checked before anything is sent — one signed transaction per request, its message the one
//   asked for save for compute-budget instructions the wallet added or replaced (Phantom
//   documents that it sets a priority fee), any other change refused by name, and a valid
//   signature by the connected account over the message the wallet returned.
// The connection follows the wallet: `standard:events` changes of account or chain are
// reported, wallets that register after the page loaded join the chooser.

import {
  createKeyPairSignerFromBytes,
  getPublicKeyFromAddress,
  verifySignature,
  getTransactionDecoder,
  getTransactionEncoder,
  type Address,
  type SignatureBytes,
  type TransactionModifyingSigner,
  type TransactionSendingSigner,
  type TransactionSigner,
} from '@solana/kit';
import { getWallets } from '@wallet-standard/app';
import type { Wallet, WalletAccount } from '@wallet-standard/base';
import { isRejection, messageChange, SignRejected } from '@compute-market/client';

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

/** The cluster a genesis hash names (`localnet` for any other: a cluster of its own). */
export function clusterOf(genesis: string): string {
  return (Object.keys(GENESIS) as (keyof typeof GENESIS)[]).find((k) => GENESIS[k] === genesis) ?? 'localnet';
}

/** The chain id Wallet Standard names for a cluster, from its genesis hash (not its URL: any
 * host can front any cluster). */
export function chainOf(genesis: string): string {
  return `solana:${clusterOf(genesis)}`;
}

const SIGN = 'solana:signTransaction';
const SIGN_AND_SEND = 'solana:signAndSendTransaction';

/** The wallets that can connect and sign Solana transactions, as registered now. */
export function solanaWallets(): readonly Wallet[] {
  return getWallets()
    .get()
    .filter((w) => 'standard:connect' in w.features && (SIGN in w.features || SIGN_AND_SEND in w.features));
}

/** Calls `f` whenever a wallet registers or unregisters; returns the unsubscribe. */
export function onWalletsChanged(f: () => void): () => void {
  const api = getWallets();
  const offs = [api.on('register', f), api.on('unregister', f)];
  return () => offs.forEach((off) => off());
}

/** A connected wallet. */
export interface Connection extends Signer {
  wallet: Wallet;
  /** Disconnects (the wallet's `standard:disconnect`, when it has one) and stops listening. */
  disconnect(): Promise<void>;
}

/** What changed in a connected wallet. */
export type WalletChange =
  | { kind: 'account'; address: Address }
  | { kind: 'disconnected' }
  | { kind: 'chain'; chains: readonly string[] }
  /** Back on this cluster's network. */
  | { kind: 'chainBack' };

/** Connects `wallet` for the cluster of `genesis`; `onChange` hears of a new account, a
 * disconnect or a change of chain made in the wallet. */
export async function connectWallet(wallet: Wallet, genesis: string, onChange: (c: WalletChange) => void): Promise<Connection> {
  const features = wallet.features as Record<string, any>;
  const { accounts } = await features['standard:connect'].connect();
  const account: WalletAccount | undefined = accounts?.[0];
  if (!account) throw new Error(`${wallet.name} connected no account`);
  const chain = chainOf(genesis);
  if (Array.isArray(account.chains) && account.chains.length > 0 && !account.chains.includes(chain as any)) {
    throw new Error(`${wallet.name}'s account is for ${account.chains.join(', ')}, this cluster is ${chain}: switch the wallet's network`);
  }
  const me = account.address as Address;
  // a wallet that can sign alone is asked to sign alone: the page sends, and so uploads the
  // person's data only once they have signed (one that only signs and sends gets it just before)
  const sends = !(SIGN in features);
  const signer = sends ? sendingSigner(wallet, account, chain) : modifyingSigner(wallet, account, chain, await getPublicKeyFromAddress(me));
  const off: (() => void) | undefined = features['standard:events']?.on('change', (props: { accounts?: readonly WalletAccount[]; chains?: readonly string[] }) => {
    if (props.accounts) {
      const first = props.accounts[0];
      if (!first) onChange({ kind: 'disconnected' });
      else if (first.address !== me) onChange({ kind: 'account', address: first.address as Address });
    }
    if (props.chains) onChange(props.chains.includes(chain) ? { kind: 'chainBack' } : { kind: 'chain', chains: props.chains });
  });
  return {
    signer,
    wallet,
    label: `${wallet.name} (Wallet Standard${sends ? ', signs and sends' : ''})`,
    async disconnect() {
      off?.();
      await features['standard:disconnect']?.disconnect();
    },
  };
}

/** What the wallet answers when asked to sign; the person's "no" as a `SignRejected`. */
async function asked<T>(wallet: Wallet, f: () => Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (e) {
    if (isRejection(e)) throw new SignRejected(wallet.name);
    throw e;
  }
}

const encode = (tx: Parameters<TransactionModifyingSigner['modifyAndSignTransactions']>[0][number]) => new Uint8Array(getTransactionEncoder().encode(tx));

/** A wallet that signs and sends (`solana:signAndSendTransaction`). */
function sendingSigner(wallet: Wallet, account: WalletAccount, chain: string): TransactionSendingSigner {
  const features = wallet.features as Record<string, any>;
  return {
    address: account.address as Address,
    async signAndSendTransactions(txs) {
      const outs: { signature: Uint8Array }[] = await asked(wallet, () =>
        features[SIGN_AND_SEND].signAndSendTransaction(...txs.map((tx) => ({ account, chain, transaction: encode(tx), options: { preflightCommitment: 'confirmed' } }))),
      );
      if (!Array.isArray(outs) || outs.length !== txs.length) throw new Error(`${wallet.name} returned ${outs?.length} signatures for ${txs.length} transactions`);
      return outs.map((o) => {
        if (!(o?.signature instanceof Uint8Array) || o.signature.length !== 64) throw new Error(`${wallet.name} returned a signature that is not 64 bytes`);
        return o.signature as SignatureBytes;
      });
    },
  };
}

/** A wallet that signs (`solana:signTransaction`); what it returns is checked. */
function modifyingSigner(wallet: Wallet, account: WalletAccount, chain: string, key: CryptoKey): TransactionModifyingSigner {
  const features = wallet.features as Record<string, any>;
  const me = account.address as Address;
  return {
    address: me,
    async modifyAndSignTransactions(txs) {
      const outs: { signedTransaction: Uint8Array }[] = await asked(wallet, () => features[SIGN].signTransaction(...txs.map((tx) => ({ account, chain, transaction: encode(tx) }))));
      if (!Array.isArray(outs) || outs.length !== txs.length) throw new Error(`${wallet.name} returned ${outs?.length} transactions for ${txs.length}`);
      return Promise.all(
        outs.map(async (o, i) => {
          let signed;
          try {
            signed = getTransactionDecoder().decode(o.signedTransaction);
          } catch (e) {
            throw new Error(`${wallet.name} returned bytes that are not a transaction: refused, nothing was sent (${(e as Error).message})`);
          }
          const sent = txs[i];
          const change = messageChange(new Uint8Array(sent.messageBytes), new Uint8Array(signed.messageBytes));
          if (change) throw new Error(`${wallet.name} changed the transaction before signing it (${change}): refused, nothing was sent`);
          const sig = signed.signatures[me];
          if (!sig) throw new Error(`${wallet.name} returned the transaction unsigned`);
          if (!(await verifySignature(key, sig, signed.messageBytes))) throw new Error(`${wallet.name}'s signature does not verify for ${me}`);
          const others = Object.entries(sent.signatures).filter(([a, s]) => a !== me && s);
          const same = sent.messageBytes.length === signed.messageBytes.length && sent.messageBytes.every((b, j) => b === signed.messageBytes[j]);
          if (!same && others.length > 0) throw new Error(`${wallet.name} changed the compute budget of a transaction others had signed: refused, nothing was sent`);
          // the wallet's message (its compute budget), the lifetime the page chose (checked
          // equal); over the same message, the signatures others made here stand
          const signatures = same ? { ...signed.signatures, ...Object.fromEntries(others) } : signed.signatures;
          return { ...signed, signatures, lifetimeConstraint: (sent as any).lifetimeConstraint } as any;
        }),
      );
    },
  };
}
