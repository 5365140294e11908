// Token amounts as people read and type them: base units (u64, as the chain holds them) shown
// with the mint's decimals and a symbol, and typed text parsed back exactly (no floats), with an
// error that names what is wrong.

/** Largest base-unit amount a u64 holds. */
export const U64_MAX = (1n << 64n) - 1n;

/** `base` base units as a decimal string with `decimals` places, trailing zeros dropped
 * (`1500000`, 6 → `"1.5"`). */
export function toUiAmount(base: bigint, decimals: number): string {
  checkDecimals(decimals);
  const neg = base < 0n;
  const abs = neg ? -base : base;
  const unit = 10n ** BigInt(decimals);
  const whole = (abs / unit).toString();
  const frac = (abs % unit).toString().padStart(decimals, '0').replace(/0+$/, '');
  return `${neg ? '-' : ''}${whole}${frac ? `.${frac}` : ''}`;
}

/** `base` base units with the symbol: `"1.5 CMT"`. */
export function formatAmount(base: bigint, decimals: number, symbol: string): string {
  return `${toUiAmount(base, decimals)} ${symbol}`.trimEnd();
}

/** The base units of a typed amount (`"1.5"`, 6 → `1500000n`): digits with at most one point
 * and at most `decimals` places, not negative, at most a u64; throws naming the problem. */
export function parseUiAmount(text: string, decimals: number): bigint {
  checkDecimals(decimals);
  const t = text.trim().replace(/_/g, '');
  if (t.startsWith('-')) throw new Error(`the amount ${JSON.stringify(text)} is negative`);
  const m = /^(\d*)(?:\.(\d*))?$/.exec(t);
  if (!m || (m[1] === '' && (m[2] ?? '') === '')) throw new Error(`the amount ${JSON.stringify(text)} is not a number (digits and one point, e.g. 1.5)`);
  const frac = m[2] ?? '';
  if (frac.replace(/0+$/, '').length > decimals) {
    throw new Error(`the amount ${JSON.stringify(text)} has more than ${decimals} decimal places, the token's smallest unit`);
  }
  const base = BigInt(m[1] || '0') * 10n ** BigInt(decimals) + BigInt((frac.slice(0, decimals) || '0').padEnd(decimals, '0'));
  if (base > U64_MAX) throw new Error(`the amount ${JSON.stringify(text)} is more than a token account can hold`);
  return base;
}

function checkDecimals(decimals: number) {
  if (!Number.isInteger(decimals) || decimals < 0 || decimals > 18) throw new Error(`a mint's decimals are 0‥18, not ${decimals}`);
}
