// Accounts read from an RPC node (a stranger): their bytes are used only once the account is
// the program's, of the type's exact size and with its discriminator.

import { getBase64Encoder, type Address, type ReadonlyUint8Array } from '@solana/kit';
import { COMPUTE_MARKET_PROGRAM_ADDRESS } from './generated/programs';

/** An account as `getAccountInfo` / `getProgramAccounts` return it in base64. */
export interface AccountValue {
  owner: Address;
  lamports: bigint;
  data: readonly [string, 'base64'] | readonly string[];
}

/** The data of `value`, checked to be a `name` account of the program: its owner, its `size`
 * and its `discriminator`; throws naming what differs. */
export function checkedAccountData(
  value: AccountValue,
  name: string,
  discriminator: ReadonlyUint8Array,
  size: number,
  programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS,
): Uint8Array {
  const what = `the ${name.toLowerCase()} account`;
  if (value.owner !== programAddress) throw new Error(`${what} is owned by ${value.owner}, not the program ${programAddress}`);
  const bytes = new Uint8Array(getBase64Encoder().encode(String(value.data[0])));
  if (bytes.length !== size) throw new Error(`${what} holds ${bytes.length} bytes, a ${name} is ${size}`);
  if (!discriminator.every((x, i) => bytes[i] === x)) throw new Error(`the account is not a ${name} (its discriminator differs)`);
  return bytes;
}
