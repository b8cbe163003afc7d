"""Two symbolic dims: a matmul that depends only on b, a softmax that depends only on s."""

from tvm.script import ir as I
from tvm.script import relax as R


@I.ir_module
class Module:
    @R.function
    def main(
        x: R.Tensor(("b", 32), "float32"),
        w: R.Tensor((32, 16), "float32"),
        y: R.Tensor(("s", 16), "float32"),
    ):
        R.func_attr({"tir_var_upper_bound": {"b": 8, "s": 64}})
        with R.dataflow():
            h = R.matmul(x, w)
            p = R.nn.softmax(y, axis=-1)
            out = (h, p)
            R.output(out)
        return out
