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
 * ("prefill"), then decodes STEPS tokens greedily ("decode") and prints them, space separated. The
 * cache is one NDArray the functions update in place; each call gets the tokens so far as a
 * [1, t] array.
 */
public final class Generate {
    /** fn(tokens[:t], kv) -> (logits, kv): the argmax of the logits. */
    static long step(Function fn, long[] tokens, int t, NDArray kv) {
        try (NDArray tok = NDArray.fromLongArray(java.util.Arrays.copyOf(tokens, t), new long[] {1, t});
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
                // (more tokens than the cache's positions: the runtime refuses the call, naming the limit)
                long[] tokens = new long[t + steps];
                for (int i = 0; i < t; i++) tokens[i] = Long.parseLong(args[2 + i]);
                long next = step(prefill, tokens, t, kv);
                StringBuilder out = new StringBuilder();
                for (int k = 0; k < steps; k++) {
                    out.append(k == 0 ? "" : " ").append(next);
                    if (k + 1 == steps) break;
                    tokens[t++] = next;
                    next = step(decode, tokens, t, kv);
                }
                System.out.println(out);
            }
        } catch (KilnException e) {
            System.err.println("Generate: " + e.getMessage());
            System.exit(1);
        }
    }
}
