import ai.kiln.*;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.file.Files;
import java.nio.file.Paths;

/**
 * An external function written in Java: registers "env.relu" with Function.register, runs a
 * model whose graph calls it (API.md section 3, weights bound), and prints the output on one
 * line. Then checks the failure paths: a callback that throws fails the call with
 * KilnException RUNTIME naming the exception; after unregister, init fails with NOT_FOUND.
 *
 * <pre>java JavaExternal net.so x.bin</pre>
 */
public final class JavaExternal {
    public static void main(String[] args) throws IOException {
        ByteBuffer bytes = ByteBuffer.wrap(Files.readAllBytes(Paths.get(args[1]))).order(ByteOrder.LITTLE_ENDIAN);
        float[] xs = new float[bytes.remaining() / 4];
        bytes.asFloatBuffer().get(xs);
        int[] calls = {0};
        Function.register("env.relu", in -> {
            calls[0]++;
            float[] x = in[0].asNDArray().toFloatArray();
            FloatBuffer out = in[1].asNDArray().asByteBuffer().asFloatBuffer();
            for (float v : x) out.put(Math.max(v, 0f));
            return null;
        }, true);
        try (NDArray x = NDArray.fromFloatArray(xs, new long[] {1, 784});
             KilnModule lib = KilnModule.load(args[0]);
             KilnModule vm = lib.getFunction("load_executable").invoke().asModule()) {
            vm.getFunction("init").pushArg(Device.cpu()).invoke();
            try (Value y = vm.getFunction("main").pushArg(x).invoke()) {
                StringBuilder line = new StringBuilder("output");
                for (float v : y.asNDArray().toFloatArray()) line.append(' ').append(v);
                System.out.println(line);
            }
            System.out.println("calls " + calls[0]);

            Function.register("env.relu", in -> {
                throw new IllegalStateException("relu refused");
            }, true);
            vm.getFunction("init").pushArg(Device.cpu()).invoke();   // looks the function up again
            try {
                vm.getFunction("main").pushArg(x).invoke();
                System.out.println("no exception");
            } catch (KilnException e) {
                System.out.println("thrown " + e.getStatusName() + " " + e.getMessage());
            }

            Function.unregister("env.relu");
            try {
                vm.getFunction("init").pushArg(Device.cpu()).invoke();
                System.out.println("no exception");
            } catch (KilnException e) {
                System.out.println("unregistered " + e.getStatusName() + " " + e.getMessage());
            }
        }
    }
}
