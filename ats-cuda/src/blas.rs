//! cuBLAS for prefill-sized matrix products, on the compute stream, with a
//! workspace the device reserved in its ledger.
//!
//! Layout: ATS matrices are row-major, cuBLAS is column-major. `y[n, N] =
//! x[n, K] W[N, K]^T` is, column-major, `Y (N x n) = W^T (N x K) X (K x n)`
//! with `W` stored as a K x N column-major matrix: `gemm(T, N, m = N, n, k =
//! K, A = W, lda = K, B = X, ldb = K, C = Y, ldc = N)`.

use std::ffi::c_void;

use cudarc::cublas::{result, sys};
use cudarc::driver::CudaStream;
use cudarc::driver::sys::CUdeviceptr;

use crate::CudaError;

fn blas(call: &str, r: Result<(), result::CublasError>) -> Result<(), CudaError> {
    r.map_err(|e| CudaError::Driver {
        call: call.to_string(),
        message: format!("{e:?}"),
    })
}

/// A cuBLAS handle bound to the compute stream.
#[derive(Debug)]
pub struct Blas {
    handle: sys::cublasHandle_t,
}

// SAFETY: the handle is only used under the device's state lock, one call
// at a time, and cuBLAS handles may move between threads.
unsafe impl Send for Blas {}
// SAFETY: as above.
unsafe impl Sync for Blas {}

/// Element types of a product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmType {
    /// f32 weights and activations (exact f32 products, no TF32).
    F32,
    /// f16 weights and activations, f32 accumulation and output.
    F16,
}

/// One product `y[n, N] = x[n, K] W[N, K]^T` (row-major) for [`Blas::gemm`].
#[derive(Clone, Copy, Debug)]
pub struct Gemm {
    /// Element type of `w` and `x`.
    pub ty: GemmType,
    /// The weights: `rows` rows of `cols` elements.
    pub w: CUdeviceptr,
    /// Weight rows (N).
    pub rows: usize,
    /// Weight columns (K).
    pub cols: usize,
    /// The activations: `n` rows of `cols` elements.
    pub x: CUdeviceptr,
    /// Activation rows (n).
    pub n: usize,
    /// The output: `n` rows of `rows` floats, `ldy` floats apart.
    pub y: CUdeviceptr,
    /// Row stride of `y` in floats; at least `rows`.
    pub ldy: usize,
}

impl Blas {
    /// A handle on `stream` using `workspace` (`ws_bytes` bytes of device memory
    /// that stays allocated while the handle lives). The caller has bound the
    /// context and made sure cuBLAS is loaded.
    pub fn new(
        stream: &CudaStream,
        workspace: CUdeviceptr,
        ws_bytes: usize,
    ) -> Result<Blas, CudaError> {
        let handle = result::create_handle().map_err(|e| CudaError::Driver {
            call: "cublasCreate".into(),
            message: format!("{e:?}"),
        })?;
        let b = Blas { handle };
        // SAFETY: the handle is live; the stream belongs to the current context.
        blas("cublasSetStream", unsafe {
            result::set_stream(b.handle, stream.cu_stream() as sys::cudaStream_t)
        })?;
        // SAFETY: the workspace is device memory of `ws_bytes` that outlives
        // the handle (the device drops the handle first).
        blas("cublasSetWorkspace", unsafe {
            sys::cublasSetWorkspace_v2(b.handle, workspace as *mut c_void, ws_bytes).result()
        })?;
        Ok(b)
    }

    /// Runs the product `g` on the handle's stream.
    ///
    /// # Safety
    /// The pointers must be device memory of this context holding the
    /// matrices described, with `ldy >= rows`.
    pub unsafe fn gemm(&self, g: &Gemm) -> Result<(), CudaError> {
        let Gemm {
            ty,
            w,
            rows,
            cols,
            x,
            n,
            y,
            ldy,
        } = *g;
        let (alpha, beta) = (1.0f32, 0.0f32);
        let dt = match ty {
            GemmType::F32 => sys::cudaDataType::CUDA_R_32F,
            GemmType::F16 => sys::cudaDataType::CUDA_R_16F,
        };
        // SAFETY: per the function's contract; alpha/beta are host scalars
        // (the default pointer mode).
        blas("cublasGemmEx", unsafe {
            result::gemm_ex(
                self.handle,
                sys::cublasOperation_t::CUBLAS_OP_T,
                sys::cublasOperation_t::CUBLAS_OP_N,
                rows as i32,
                n as i32,
                cols as i32,
                &alpha as *const f32 as *const c_void,
                w as *const c_void,
                dt,
                cols as i32,
                x as *const c_void,
                dt,
                cols as i32,
                &beta as *const f32 as *const c_void,
                y as *mut c_void,
                sys::cudaDataType::CUDA_R_32F,
                ldy as i32,
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        })
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once.
        let _ = unsafe { result::destroy_handle(self.handle) };
    }
}
