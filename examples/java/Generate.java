import ai.kiln.*;

import java.util.List;

/**
 * Greedy generation from a language model exported by Kiln (examples/export_gpt.py).
 *
 * <pre>
 * java -cp kiln.jar:. -Djava.library.path=... Generate gpt.so STEPS TOKEN...
 * </pre>
 *
 * Loads the one artifact, creates its KV cache ("create_cache"), prefills the prompt's token ids
 * ("prefill": tokens[1, n]), then decodes STEPS tokens greedily ("decode": one token[1, 1] per
 * step) and prints them, space separated. The cache is one NDArray the functions update in place;
 * it holds its own length, so a step passes only the new token.
 */
public final class Generate {
    /** fn(tokens[1, t], kv) -> (logits, kv): the argmax of the logits. */
    static long step(Function fn, long[] tokens, NDArray kv) {
        try (NDArray tok = NDArray.fromLongArray(tokens, new long[] {1, tokens.length});
             Value result = fn.pushArg(tok).pushArg(kv).invoke()) {
            List<Value> items = result.asTuple();
            try (NDArray logits = items.get(0).asNDArray()) {
                float[] v = logits.toFloatArray();
                int best = 0;
                for (int i = 1; i < v.length; i++) {
                    if (v[i] > v[best]) best = i;
                }
                return best;
            } finally {
                for (Value item : items) item.close();
            }
        }
    }

    public static void main(String[] args) {
        if (args.length < 3) {
            System.err.println("usage: Generate MODEL.so STEPS TOKEN...");
            System.exit(2);
        }
        int steps = Integer.parseInt(args[1]);
        try (KilnModule lib = KilnModule.load(args[0]);
             KilnModule vm = lib.getFunction("load_executable").invoke().asModule()) {
            vm.getFunction("init").pushArg(Device.cpu()).invoke();
            Function prefill = vm.getFunction("prefill");
            Function decode = vm.getFunction("decode");
            try (NDArray kv = vm.getFunction("create_cache").invoke().asNDArray()) {
                int t = args.length - 2;
                if (steps < 1) {
                    System.err.println("Generate: STEPS must be at least 1");
                    System.exit(2);
                }
                // kv_cache[layers, 2, heads, max_len + 1, head_dim]: the last position holds the length
                long maxLen = kv.shape()[3] - 1;
                long[] prompt = new long[t];
                for (int i = 0; i < t; i++) prompt[i] = Long.parseLong(args[2 + i]);
                // (a prompt longer than the cache: the runtime refuses prefill, naming the limit)
                long next = step(prefill, prompt, kv);
                StringBuilder out = new StringBuilder();
                for (int k = 0; k < steps; k++) {
                    out.append(k == 0 ? "" : " ").append(next);
                    if (k + 1 == steps) break;
                    if (t == maxLen) { // decode would return NaN logits: the cache is full
                        System.out.println(out);
                        System.err.println("Generate: the KV cache is full (" + maxLen + " positions)");
                        System.exit(1);
                    }
                    next = step(decode, new long[] {next}, kv);
                    t++;
                }
                System.out.println(out);
            }
        } catch (KilnException e) {
            System.err.println("Generate: " + e.getMessage());
            System.exit(1);
        }
    }
}
