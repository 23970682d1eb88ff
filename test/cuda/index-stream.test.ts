// Int32Array index arrays through the index stream (the default; set here as FA_INDEX_STREAM=1 all the
// same; csrc/binding/context.h, TakeIndexSlot): a call's host index arrays are copied into one of eight device slots on a stream of
// their own, which the call's stream waits for by an event; a slot is reused only after the kernels
// of the call before that used it are done. The checks: test/cuda/index-calls.ts.
// Skipped (visibly) without a CUDA device; fails under FA_REQUIRE_GPU=1 when there is none.
import { indexArrayTests } from './index-calls';

process.env.FA_INDEX_STREAM = '1';  // read by the native context at its first host index array

indexArrayTests('CUDA: host index arrays through the index stream (FA_INDEX_STREAM=1)', 'stream');
