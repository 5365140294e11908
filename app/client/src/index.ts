// @compute-market/client: the program's instructions, accounts, errors and PDAs generated from
// the IDL by Codama (./generated), and the hand-written protocol encoders (job specs, input
// manifests) byte-identical to the Rust ones.
export * from './generated';
export * from './job';
export * from './manifest';
export * from './pda';
export * from './events';
export * from './accounts';
export * from './watch';
export * from './commitment';
export * from './results';
export * from './tx';
export * from './inputs';
export * from './history';
export * from './dispute';
export * from './availability';
export * from './amounts';
export * from './network';
export * from './budget';
export * from './queries';
export * from './staking';
export * from './client';
export * from './changes';
export * from './tokenize';
