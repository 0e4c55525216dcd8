import ai.kiln.*;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.List;

/**
 * SEED_FLOWS.md section C from Java: {@code import ai.kiln.*;} beside java.lang (this class uses
 * java.lang.Module too), and a language model's functions called with the tutorials' call shape,
 * {@code vm.getFunction("prefill").pushArg(data).pushArg(weight).pushArg(kvCache).invoke()}.
 *
 * <pre>java PrefillDecode lm.so dir</pre> reads dir/{inputs,weight,kv_cache,token}.bin (raw
 * float32) and prints each output as "name v0 v1 ..." on one line.
 */
public final class PrefillDecode {
    static NDArray read(String path, long... shape) throws IOException {
        ByteBuffer bytes = ByteBuffer.wrap(Files.readAllBytes(Paths.get(path))).order(ByteOrder.LITTLE_ENDIAN);
        float[] v = new float[bytes.remaining() / 4];
        bytes.asFloatBuffer().get(v);
        return NDArray.fromFloatArray(v, shape);
    }

    static void print(String name, NDArray a) {
        StringBuilder line = new StringBuilder(name);
        for (float v : a.toFloatArray()) line.append(' ').append(v);
        System.out.println(line);
    }

    public static void main(String[] args) throws IOException {
        Module javaLangModule = PrefillDecode.class.getModule();   // java.lang.Module, unambiguous
        if (javaLangModule.isNamed()) throw new AssertionError("expected the unnamed module");
        String dir = args[1];
        try (NDArray data = read(dir + "/inputs.bin", 1, 4, 16);
             NDArray weight = read(dir + "/weight.bin", 16, 16);
             NDArray kvCache = read(dir + "/kv_cache.bin", 1, 4, 16);
             NDArray token = read(dir + "/token.bin", 1, 1, 16);
             KilnModule lib = KilnModule.load(args[0]);
             KilnModule vm = lib.getFunction("load_executable").invoke().asModule()) {
            vm.getFunction("init").pushArg(Device.cpu()).invoke();
            try (Value pre = vm.getFunction("prefill").pushArg(data).pushArg(weight).pushArg(kvCache).invoke()) {
                List<Value> p = pre.asTuple();
                NDArray cache = p.get(1).asNDArray();
                try (Value dec = vm.getFunction("decode").pushArg(token).pushArg(weight).pushArg(cache).invoke()) {
                    print("prefill_logits", p.get(0).asNDArray());
                    print("prefill_cache", cache);
                    print("decode_logits", dec.asTuple().get(0).asNDArray());
                }
            }
        }
    }
}
