//! The network's three convolutions as fused operations behind burn's backend-extension point.
//!
//! On `flex` (the server, and the browser's CPU fallback) each one is a single call into
//! `split-kernels`: NHWC activations, bias, ReLU6 and the residual add applied in the kernel's
//! epilogue, TF-SAME padding in its index ranges. On every other device (WebGPU in the browser,
//! wgpu on a GPU server) the same operation is composed of plain burn tensor ops, so one model
//! definition and one parameter layout serve both.
//!
//! Activations inside the network are NHWC (`[n, h, w, c]`); [`super::EfficientNetLite0`]
//! converts at `forward_range`'s ends, so boundaries and frames keep their NCHW meaning.
//!
//! Parameter layouts (what the kernels read directly):
//! - pointwise weight in panels `[c_out / pw, c_in, pw]` ([`pointwise_weight_dims`]): each
//!   block of output channels a kernel tile reads is contiguous, which matters when the
//!   weights come cold from memory (every forward, for the 7×7 layers);
//! - depthwise weight `[k * k, c]`;
//! - stem weight `[k * k * c_in, c_out]` (`[ky][kx][ci][co]`).

use burn::backend::{Backend, DispatchDevice, Flex, backend_extension, tensor::FloatTensor};
use burn::tensor::module::conv2d;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{Device, Tensor, TensorData};
use split_kernels::{Activation, Conv, ConvShape, Isa, MbConvParams, MbConvShape, PointwiseShape};
use std::sync::atomic::{AtomicBool, Ordering};

/// Fused convolutions for the backends that have kernels for them.
#[backend_extension(Flex)]
pub trait FusedConvBackend: Backend {
    /// 1x1 conv + bias (+ ReLU6 when `relu6`). `x: [n, h, w, c_in]`, `weight` in panels
    /// `[c_out / pw, c_in, pw]`.
    fn fused_pointwise(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        relu6: bool,
    ) -> FloatTensor<Self>;
    /// 1x1 conv + bias + `residual` (linear): an MBConv projection with its skip connection.
    fn fused_pointwise_add(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        residual: FloatTensor<Self>,
    ) -> FloatTensor<Self>;
    /// Depthwise kxk + bias + ReLU6, TF-SAME. `x: [n, h, w, c]`, `weight: [k * k, c]`.
    fn fused_depthwise(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        kernel: usize,
        stride: usize,
    ) -> FloatTensor<Self>;
    /// A whole MBConv block: 1x1 expansion + ReLU6, depthwise kxk + ReLU6, linear 1x1
    /// projection (+ `x` when `residual`). Weights as in the three operations above.
    #[allow(clippy::too_many_arguments)]
    fn fused_mbconv(
        x: FloatTensor<Self>,
        expand_weight: FloatTensor<Self>,
        expand_bias: FloatTensor<Self>,
        depthwise_weight: FloatTensor<Self>,
        depthwise_bias: FloatTensor<Self>,
        project_weight: FloatTensor<Self>,
        project_bias: FloatTensor<Self>,
        kernel: usize,
        stride: usize,
        residual: bool,
    ) -> FloatTensor<Self>;
    /// [`Self::fused_mbconv`] for a block without expansion (the extension point takes no
    /// optional tensors).
    #[allow(clippy::too_many_arguments)]
    fn fused_dw_project(
        x: FloatTensor<Self>,
        depthwise_weight: FloatTensor<Self>,
        depthwise_bias: FloatTensor<Self>,
        project_weight: FloatTensor<Self>,
        project_bias: FloatTensor<Self>,
        kernel: usize,
        stride: usize,
        residual: bool,
    ) -> FloatTensor<Self>;
    /// The stem: NCHW `x: [n, c_in, h, w]` to NHWC, + bias + ReLU6, TF-SAME.
    fn fused_stem(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        kernel: usize,
        stride: usize,
    ) -> FloatTensor<Self>;
}

mod flex_impl {
    use super::*;
    use burn::backend::TensorMetadata;
    use burn::backend::flex::FlexTensor;

    /// The tensor's values in row-major order (a copy only for a strided view).
    fn values(t: &FlexTensor) -> std::borrow::Cow<'_, [f32]> {
        match t.as_slice::<f32>() {
            Some(s) => std::borrow::Cow::Borrowed(s),
            None => {
                let t = t.to_contiguous();
                let s = t.as_slice::<f32>().expect("a contiguous f32 tensor has a slice");
                std::borrow::Cow::Owned(s.to_vec())
            }
        }
    }

    fn tensor(values: Vec<f32>, shape: Vec<usize>) -> FlexTensor {
        FlexTensor::from_data(TensorData::new(values, shape))
    }

    fn pointwise(
        x: FlexTensor,
        w: FlexTensor,
        b: FlexTensor,
        act: Activation,
        residual: Option<FlexTensor>,
    ) -> FlexTensor {
        let mut dims = x.shape().to_vec();
        let [panels, c_in, pw] = [w.shape()[0], w.shape()[1], w.shape()[2]];
        let c_out = panels * pw;
        let pixels = dims[..dims.len() - 1].iter().product();
        let s = PointwiseShape { pixels, c_in, c_out };
        // Weights loaded for another device (one panel) would be read in the wrong order.
        assert_eq!(pw, s.panel_width(), "1x1 weight not in the kernels' panel layout");
        let res = residual.as_ref().map(values);
        let out = split_kernels::pointwise_new(
            Isa::detect(),
            s,
            &values(&x),
            &values(&w),
            &values(&b),
            act,
            res.as_deref(),
        );
        *dims.last_mut().expect("rank 4") = c_out;
        tensor(out, dims)
    }

    /// A kernel that runs a kxk convolution into a new NHWC vector.
    type ConvKernel = fn(Isa, ConvShape, &[f32], &[f32], &[f32], Activation) -> Vec<f32>;

    /// A kxk convolution + bias + ReLU6 with TF-SAME padding; `x` is NCHW when `nchw` (the
    /// stem), NHWC otherwise; the output is NHWC.
    fn conv(
        run: ConvKernel,
        x: FlexTensor,
        w: FlexTensor,
        b: FlexTensor,
        c_out: usize,
        [kernel, stride]: [usize; 2],
        nchw: bool,
    ) -> FlexTensor {
        let d = x.shape();
        let (height, width, c_in) = if nchw { (d[2], d[3], d[1]) } else { (d[1], d[2], d[3]) };
        let s = ConvShape { batch: d[0], height, width, c_in, c_out, kernel, stride };
        let out = run(Isa::detect(), s, &values(&x), &values(&w), &values(&b), Activation::Relu6);
        let (oh, ow) = s.out_hw();
        tensor(out, vec![s.batch, oh, ow, s.c_out])
    }

    /// Output channels of a 1x1 weight in panels `[c_out / pw, c_in, pw]`.
    fn pointwise_out(w: &FlexTensor) -> usize {
        w.shape()[0] * w.shape()[2]
    }

    /// One MBConv block through [`split_kernels::mbconv`].
    fn mbconv(
        x: FlexTensor,
        expand: Option<[FlexTensor; 2]>,
        [dw_w, dw_b, project_w, project_b]: [FlexTensor; 4],
        [kernel, stride]: [usize; 2],
        residual: bool,
    ) -> FlexTensor {
        let d = x.shape().to_vec();
        let c_mid = expand.as_ref().map_or(d[3], |[w, _]| pointwise_out(w));
        let c_out = pointwise_out(&project_w);
        let s = MbConvShape {
            batch: d[0],
            height: d[1],
            width: d[2],
            c_in: d[3],
            c_mid,
            c_out,
            kernel,
            stride,
        };
        let expand = expand.as_ref().map(|[w, b]| [values(w), values(b)]);
        let (dw_w, dw_b, pj_w, pj_b) =
            (values(&dw_w), values(&dw_b), values(&project_w), values(&project_b));
        let p = MbConvParams {
            expand: expand.as_ref().map(|[weight, bias]| Conv { weight, bias }),
            depthwise: Conv { weight: &dw_w, bias: &dw_b },
            project: Conv { weight: &pj_w, bias: &pj_b },
        };
        let out = split_kernels::mbconv_new(Isa::detect(), s, &values(&x), &p, residual);
        let (oh, ow) = s.depthwise(1).out_hw();
        tensor(out, vec![s.batch, oh, ow, c_out])
    }

    impl FusedConvBackend for Flex {
        fn fused_pointwise(x: FlexTensor, w: FlexTensor, b: FlexTensor, relu6: bool) -> FlexTensor {
            let act = if relu6 { Activation::Relu6 } else { Activation::Linear };
            pointwise(x, w, b, act, None)
        }

        fn fused_pointwise_add(
            x: FlexTensor,
            w: FlexTensor,
            b: FlexTensor,
            residual: FlexTensor,
        ) -> FlexTensor {
            pointwise(x, w, b, Activation::Linear, Some(residual))
        }

        fn fused_depthwise(
            x: FlexTensor,
            w: FlexTensor,
            b: FlexTensor,
            kernel: usize,
            stride: usize,
        ) -> FlexTensor {
            let c = x.shape()[3];
            conv(split_kernels::depthwise_new, x, w, b, c, [kernel, stride], false)
        }

        fn fused_mbconv(
            x: FlexTensor,
            expand_w: FlexTensor,
            expand_b: FlexTensor,
            dw_w: FlexTensor,
            dw_b: FlexTensor,
            project_w: FlexTensor,
            project_b: FlexTensor,
            kernel: usize,
            stride: usize,
            residual: bool,
        ) -> FlexTensor {
            let block = [dw_w, dw_b, project_w, project_b];
            mbconv(x, Some([expand_w, expand_b]), block, [kernel, stride], residual)
        }

        fn fused_dw_project(
            x: FlexTensor,
            dw_w: FlexTensor,
            dw_b: FlexTensor,
            project_w: FlexTensor,
            project_b: FlexTensor,
            kernel: usize,
            stride: usize,
            residual: bool,
        ) -> FlexTensor {
            mbconv(x, None, [dw_w, dw_b, project_w, project_b], [kernel, stride], residual)
        }

        fn fused_stem(
            x: FlexTensor,
            w: FlexTensor,
            b: FlexTensor,
            kernel: usize,
            stride: usize,
        ) -> FlexTensor {
            let c_out = w.shape()[1];
            conv(split_kernels::conv_nchw_to_nhwc_new, x, w, b, c_out, [kernel, stride], true)
        }
    }
}

/// Set: the plain-burn-op path runs on `flex` too (tests compare the two paths with it).
static COMPOSED_ONLY: AtomicBool = AtomicBool::new(false);

/// Run the plain-burn-op path (the one WebGPU and wgpu take) on every device, `flex` included,
/// until turned off: lets a machine without a GPU check that path against the fused one.
pub fn set_composed_only(on: bool) {
    COMPOSED_ONLY.store(on, Ordering::Relaxed);
}

/// Whether `x` lives on a device with fused kernels.
fn fused(x: &Tensor<4>) -> bool {
    has_kernels(&x.device()) && !COMPOSED_ONLY.load(Ordering::Relaxed)
}

/// Whether the fused kernels run on `device` (`flex`); elsewhere the composed ops do.
pub fn has_kernels(device: &Device) -> bool {
    matches!(device.as_dispatch(), DispatchDevice::Flex(_))
}

/// TF-SAME padding pairs `((top, bottom), (left, right))` for a kxk/s conv on `h × w`.
fn same_padding(h: usize, w: usize, k: usize, s: usize) -> [(usize, usize); 2] {
    let pair = |size: usize| {
        let total = ((size.div_ceil(s) - 1) * s + k).saturating_sub(size);
        (total / 2, total - total / 2)
    };
    [pair(h), pair(w)]
}

/// The kernels' description of a 1x1 convolution from `c_in` to `c_out` channels (one pixel).
pub fn pointwise_shape(c_in: usize, c_out: usize) -> PointwiseShape {
    PointwiseShape { pixels: 1, c_in, c_out }
}

/// Dimensions of a 1x1 weight in panels, `[c_out / pw, c_in, pw]`, for the kernels on `device`.
///
/// The kernels read panels of [`split_kernels::PANEL`] output channels; the composed ops of
/// other devices want `[c_in, c_out]`, which is one panel (`pw = c_out`): stored that way there,
/// their matmul reshapes it for free instead of transposing panels back on every call.
pub fn pointwise_weight_dims(c_in: usize, c_out: usize, device: &Device) -> [usize; 3] {
    let pw = if has_kernels(device) { pointwise_shape(c_in, c_out).panel_width() } else { c_out };
    [c_out / pw, c_in, pw]
}

/// 1x1 conv over NHWC: `act(x · weight + bias) (+ residual)`.
///
/// # Shapes
/// `x: [n, h, w, c_in]`, `weight: [c_out / pw, c_in, pw]` ([`pointwise_weight_dims`]),
/// `bias: [c_out]`, `residual: [n, h, w, c_out]`.
pub fn pointwise(
    x: Tensor<4>,
    weight: Tensor<3>,
    bias: Tensor<1>,
    relu6: bool,
    residual: Option<Tensor<4>>,
) -> Tensor<4> {
    if fused(&x) {
        let (x, w, b) = (x.into_dispatch(), weight.into_dispatch(), bias.into_dispatch());
        let out = match residual {
            Some(r) => <burn::backend::Dispatch as FusedConvBackend>::fused_pointwise_add(
                x,
                w,
                b,
                r.into_dispatch(),
            ),
            None => <burn::backend::Dispatch as FusedConvBackend>::fused_pointwise(x, w, b, relu6),
        };
        return Tensor::from_dispatch(out);
    }
    let [n, h, w, c_in] = x.dims();
    let [panels, _, pw] = weight.dims();
    let c_out = panels * pw;
    let weight = if panels == 1 {
        weight.reshape([c_in, c_out]) // loaded for this device: already [c_in, c_out]
    } else {
        weight.swap_dims(0, 1).reshape([c_in, c_out]) // the kernels' panels, back to [c_in, c_out]
    };
    let y = x.reshape([n * h * w, c_in]).matmul(weight) + bias.unsqueeze::<2>(); // [nhw, c_out]
    let y = if relu6 { y.clamp(0.0, 6.0) } else { y };
    let y = y.reshape([n, h, w, c_out]);
    match residual {
        Some(r) => y + r,
        None => y,
    }
}

/// Depthwise kxk + bias + ReLU6 over NHWC, TF-SAME padding.
///
/// # Shapes
/// `x: [n, h, w, c]`, `weight: [k * k, c]`, `bias: [c]`; returns `[n, h / s, w / s, c]`.
pub fn depthwise(
    x: Tensor<4>,
    weight: Tensor<2>,
    bias: Tensor<1>,
    kernel: usize,
    stride: usize,
) -> Tensor<4> {
    if fused(&x) {
        let out = <burn::backend::Dispatch as FusedConvBackend>::fused_depthwise(
            x.into_dispatch(),
            weight.into_dispatch(),
            bias.into_dispatch(),
            kernel,
            stride,
        );
        return Tensor::from_dispatch(out);
    }
    let [_, h, w, c] = x.dims();
    let weight = weight.transpose().reshape([c, 1, kernel, kernel]); // [c, 1, k, k]
    let padding = same_padding(h, w, kernel, stride);
    let options = ConvOptions::new_with_padding([stride, stride], padding, [1, 1], c);
    let y = conv2d(x.permute([0, 3, 1, 2]), weight, Some(bias), options); // [n, c, h', w']
    y.clamp(0.0, 6.0).permute([0, 2, 3, 1])
}

/// A 1x1 convolution's parameters: weight in panels ([`pointwise_weight_dims`]) and bias.
pub type PointwiseParams = (Tensor<3>, Tensor<1>);

/// An MBConv block over NHWC: `project(depthwise(expand(x))) (+ x)`.
///
/// On `flex` one kernel call runs the block in bands of output rows, so an early block's
/// expanded activation stays in cache ([`split_kernels::mbconv`]); elsewhere it is the three
/// operations above in turn.
///
/// # Shapes
/// `x: [n, h, w, c_in]`; `expand` `c_in → c_mid` (absent: `c_mid = c_in`), depthwise weight
/// `[k * k, c_mid]`, `project` `c_mid → c_out`; returns `[n, h / s, w / s, c_out]`. `residual`
/// needs stride 1 and `c_out = c_in`.
pub fn mbconv(
    x: Tensor<4>,
    expand: Option<PointwiseParams>,
    (dw_weight, dw_bias): (Tensor<2>, Tensor<1>),
    (project_weight, project_bias): PointwiseParams,
    [kernel, stride]: [usize; 2],
    residual: bool,
) -> Tensor<4> {
    if fused(&x) {
        type Ext = burn::backend::Dispatch;
        let x = x.into_dispatch();
        let (dw_w, dw_b) = (dw_weight.into_dispatch(), dw_bias.into_dispatch());
        let (pj_w, pj_b) = (project_weight.into_dispatch(), project_bias.into_dispatch());
        let out = match expand {
            Some((ew, eb)) => <Ext as FusedConvBackend>::fused_mbconv(
                x,
                ew.into_dispatch(),
                eb.into_dispatch(),
                dw_w,
                dw_b,
                pj_w,
                pj_b,
                kernel,
                stride,
                residual,
            ),
            None => <Ext as FusedConvBackend>::fused_dw_project(
                x, dw_w, dw_b, pj_w, pj_b, kernel, stride, residual,
            ),
        };
        return Tensor::from_dispatch(out);
    }
    let input = residual.then(|| x.clone());
    let x = match expand {
        Some((w, b)) => pointwise(x, w, b, true, None), // [n, h, w, c_mid]
        None => x,
    };
    let x = depthwise(x, dw_weight, dw_bias, kernel, stride); // [n, h / s, w / s, c_mid]
    pointwise(x, project_weight, project_bias, false, input) // [n, h / s, w / s, c_out]
}

/// The stem: NCHW input to NHWC output, + bias + ReLU6, TF-SAME padding.
///
/// # Shapes
/// `x: [n, c_in, h, w]`, `weight: [k * k * c_in, c_out]`, `bias: [c_out]`;
/// returns `[n, h / s, w / s, c_out]`.
pub fn stem(
    x: Tensor<4>,
    weight: Tensor<2>,
    bias: Tensor<1>,
    kernel: usize,
    stride: usize,
) -> Tensor<4> {
    if fused(&x) {
        let out = <burn::backend::Dispatch as FusedConvBackend>::fused_stem(
            x.into_dispatch(),
            weight.into_dispatch(),
            bias.into_dispatch(),
            kernel,
            stride,
        );
        return Tensor::from_dispatch(out);
    }
    let [_, c_in, h, w] = x.dims();
    let c_out = weight.dims()[1];
    let weight = weight.reshape([kernel, kernel, c_in, c_out]).permute([3, 2, 0, 1]);
    let options = ConvOptions::new_with_padding(
        [stride, stride],
        same_padding(h, w, kernel, stride),
        [1, 1],
        1,
    );
    conv2d(x, weight, Some(bias), options).clamp(0.0, 6.0).permute([0, 2, 3, 1])
}
