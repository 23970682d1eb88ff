// Int32Array index arrays with FA_INDEX_STREAM=0: one staged host-to-device copy on the call's own
// stream ahead of its kernels (the default until the thirty-sixth session, the opt-out since, and
// the path of every call whose index arrays outgrow a slot of the index stream). The checks:
// test/cuda/index-calls.ts.
// Skipped (visibly) without a CUDA device; fails under FA_REQUIRE_GPU=1 when there is none.
import { indexArrayTests } from './index-calls';

process.env.FA_INDEX_STREAM = '0';  // read by the native context at its first host index array

indexArrayTests('CUDA: host index arrays staged on the call stream (FA_INDEX_STREAM=0)', 'staged');
