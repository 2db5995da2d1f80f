// The pre-pass of grouped_mm's 2-D x 2-D (-p batch=grouped_k): one thread per group and operand
// writes that group's tensor map of A (even slots) or B (odd slots) into `maps` [2 * groups]
// (pcgk::write_map, gemm_group_k_h100.cuh), before the GEMM kernel on the same stream reads them.
extern "C" __global__ void __launch_bounds__(128)
pc_ws_group_maps(const __grid_constant__ pcwg::TensorMap tmA,
                 const __grid_constant__ pcwg::TensorMap tmB, pcwg::TensorMap* __restrict__ maps,
                 const int* __restrict__ offs, int groups, int k, unsigned long long a_ptr,
                 unsigned long long b_ptr, long long a_step, long long b_step, int a_dim,
                 int b_dim) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= 2 * groups) return;
    int k0, k1;
    pcgk::k_range(offs, i / 2, k, k0, k1);
    if (i % 2 == 0)
        pcgk::write_map(maps + i, tmA, a_ptr, a_step, a_dim, k0, k1);
    else
        pcgk::write_map(maps + i, tmB, b_ptr, b_step, b_dim, k0, k1);
}
