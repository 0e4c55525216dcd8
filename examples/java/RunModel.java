import ai.kiln.*;

/**
 * API.md section 5, Java: load an MLP exported by Kiln (examples/mlp.py, export_library) and run
 * its forward function on deterministic data.
 *
 * <pre>
 * make -C bindings/java example
 * java -cp bindings/java/build/kiln.jar:bindings/java/build/examples \
 *      -Djava.library.path=bindings/java/build RunModel mlp.so [in hidden out]
 * </pre>
 *
 * Inputs (float32, exactly representable): element i of input k is ((i * 7 + k * 13) % 17 - 8) / 64,
 * for x (1, in), w1 (hidden, in), b1 (hidden), w2 (out, hidden), b2 (out); defaults 784 256 10.
 * Prints the output's shape, then its values on one line.
 */
public final class RunModel {
    static NDArray data(int k, long... shape) {
        long n = 1;
        for (long d : shape) n *= d;
        float[] v = new float[(int) n];
        for (int i = 0; i < v.length; i++) {
            v[i] = (float) (((i * 7L + k * 13L) % 17) - 8) / 64f;
        }
        return NDArray.fromFloatArray(v, shape);
    }

    public static void main(String[] args) {
        if (args.length != 1 && args.length != 4) {
            System.err.println("usage: RunModel mlp.so [in hidden out]");
            System.exit(2);
        }
        int in = args.length == 4 ? Integer.parseInt(args[1]) : 784;
        int hidden = args.length == 4 ? Integer.parseInt(args[2]) : 256;
        int outDim = args.length == 4 ? Integer.parseInt(args[3]) : 10;
        try (NDArray x = data(0, 1, in);
             NDArray w1 = data(1, hidden, in);
             NDArray b1 = data(2, hidden);
             NDArray w2 = data(3, outDim, hidden);
             NDArray b2 = data(4, outDim);
             KilnModule lib = KilnModule.load(args[0]);
             KilnModule vm = lib.getFunction("load_executable").invoke().asModule()) {
            vm.getFunction("init").pushArg(Device.cpu()).invoke();
            try (NDArray out = vm.getFunction("forward")
                    .pushArg(x).pushArg(w1).pushArg(b1).pushArg(w2).pushArg(b2)
                    .invoke().asNDArray()) {
                System.out.println("output " + out.dtype() + " " + java.util.Arrays.toString(out.shape()));
                StringBuilder line = new StringBuilder();
                for (float v : out.toFloatArray()) {
                    line.append(line.length() == 0 ? "" : " ").append(v);
                }
                System.out.println(line);
            }
        }
    }
}
