import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Paths;

/**
 * Typed Java bindings of a model with tuple results: LmModel.prefill returns a PrefillResult
 * (out0, out1). <pre>java LmTyped lm.so dir</pre> prints each output as "name v0 v1 ...".
 */
public final class LmTyped {
    static float[] read(String dir, String name) throws IOException {
        ByteBuffer b = ByteBuffer.wrap(Files.readAllBytes(Paths.get(dir, name + ".bin"))).order(ByteOrder.LITTLE_ENDIAN);
        float[] v = new float[b.remaining() / 4];
        b.asFloatBuffer().get(v);
        return v;
    }

    static void print(String name, float[] v) {
        StringBuilder line = new StringBuilder(name);
        for (float x : v) line.append(' ').append(x);
        System.out.println(line);
    }

    public static void main(String[] args) throws IOException {
        float[] weight = read(args[1], "weight");
        try (LmModel lm = new LmModel(args[0])) {
            LmModel.PrefillResult pre = lm.prefill(read(args[1], "inputs"), weight, read(args[1], "kv_cache"));
            LmModel.DecodeResult dec = lm.decode(read(args[1], "token"), weight, pre.out1);
            print("prefill_logits", pre.out0);
            print("prefill_cache", pre.out1);
            print("decode_logits", dec.out0);
        }
    }
}
