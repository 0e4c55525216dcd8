import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Paths;

/**
 * The MLP through its typed Java bindings (MlpModel.java, written by export_typed.py):
 * {@code float[] forward(float[] x)} and the direct-buffer variant.
 *
 * <pre>java -cp kiln-0.1.0-linux-x86_64.jar:classes Main dir</pre>
 * Prints the 10 outputs of both variants, one pair per line.
 */
public final class Main {
    public static void main(String[] args) throws IOException {
        byte[] raw = Files.readAllBytes(Paths.get(args[0], "x.bin"));
        float[] x = new float[MlpModel.FORWARD_X_DIM0 * MlpModel.FORWARD_X_DIM1];
        ByteBuffer.wrap(raw).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(x);
        try (MlpModel mlp = new MlpModel(Paths.get(args[0], "mlp.so").toString())) {
            float[] y = mlp.forward(x);
            ByteBuffer xb = ByteBuffer.allocateDirect(raw.length).order(ByteOrder.nativeOrder());
            xb.asFloatBuffer().put(x);
            ByteBuffer yb = ByteBuffer.allocateDirect(4 * y.length).order(ByteOrder.nativeOrder());
            mlp.forward(xb, yb);
            for (int j = 0; j < y.length; j++) {
                System.out.println(y[j] + " " + yb.getFloat(4 * j));
            }
        }
    }
}
