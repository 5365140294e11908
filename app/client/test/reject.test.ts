import { describe, expect, it } from 'vitest';
import { isRejection, SignRejected } from '../src/tx';

describe("a wallet's refusal", () => {
  it("is recognised in each wallet's words, and nothing else is", () => {
    expect(isRejection(Object.assign(new Error('User rejected the request.'), { code: 4001 }))).toBe(true);
    expect(isRejection(new Error('User rejected the request.'))).toBe(true);
    expect(isRejection(new Error('Approval Denied'))).toBe(true);
    expect(isRejection(new SignRejected('Phantom'))).toBe(true);
    expect(isRejection(new Error('Transaction simulation failed'))).toBe(false);
    expect(isRejection(new Error('blockhash not found'))).toBe(false);
    expect(isRejection(undefined)).toBe(false);
  });
  it('names the wallet and what did not happen', () => {
    expect(new SignRejected('Backpack').message).toBe('you rejected the request in Backpack: nothing was signed or sent');
  });
});
