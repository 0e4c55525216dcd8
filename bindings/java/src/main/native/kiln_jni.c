/*
 * kiln_jni.c — the JNI shim behind the ai.kiln Java classes (bindings/java).
 *
 * Every entry point converts its arguments, makes the runtime call(s) and converts the result
 * before it returns; a failing runtime call becomes an ai.kiln.KilnException carrying the status
 * code, its name and kiln_last_error() (read on the same thread, right after the failure). The
 * shim keeps no per-thread state; its only globals are class and member IDs cached at load time,
 * which are immutable afterwards.
 *
 * External functions written in Java (Function.register) are runtime functions whose callback
 * enters the JVM (attaching a native thread when needed) and calls Function.dispatch.
 *
 * Ownership: a Java NDArray/KilnModule/Function owns exactly one runtime reference, handed to its
 * constructor here and given back by its release method (close() or the Cleaner). Arguments to
 * kiln_function_call are borrowed; strings and tuples made for a call are freed after it.
 */
#include <jni.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_runtime.h"
#include "kiln_strings.h"

/* Cached at JNI_OnLoad; global references, never modified afterwards. */
static JavaVM* g_jvm; /* for callbacks from the runtime (external functions written in Java) */
static jclass g_kiln_exception, g_long, g_double, g_string, g_object, g_ndarray, g_module,
    g_function, g_device, g_native_handle, g_illegal_argument, g_illegal_state, g_oom;
static jmethodID g_kiln_exception_init, g_long_value_of, g_long_value, g_double_value_of,
    g_double_value, g_string_get_bytes, g_string_init_bytes, g_ndarray_init, g_module_init,
    g_function_init, g_device_init, g_function_dispatch, g_object_to_string;
static jfieldID g_handle, g_device_type, g_device_id;
static jstring g_utf8; /* "UTF-8" */

static jclass global_class(JNIEnv* env, const char* name) {
  jclass local = (*env)->FindClass(env, name);
  if (local == NULL) return NULL;
  jclass global = (jclass)(*env)->NewGlobalRef(env, local);
  (*env)->DeleteLocalRef(env, local);
  return global;
}

JNIEXPORT jint JNICALL JNI_OnLoad(JavaVM* vm, void* reserved) {
  (void)reserved;
  JNIEnv* env;
  if ((*vm)->GetEnv(vm, (void**)&env, JNI_VERSION_1_8) != JNI_OK) return JNI_ERR;
  g_jvm = vm;
#define CLASS(var, name) \
  if ((var = global_class(env, name)) == NULL) return JNI_ERR
#define METHOD(var, cls, name, sig) \
  if ((var = (*env)->GetMethodID(env, cls, name, sig)) == NULL) return JNI_ERR
#define STATIC(var, cls, name, sig) \
  if ((var = (*env)->GetStaticMethodID(env, cls, name, sig)) == NULL) return JNI_ERR
#define FIELD(var, cls, name, sig) \
  if ((var = (*env)->GetFieldID(env, cls, name, sig)) == NULL) return JNI_ERR
  CLASS(g_kiln_exception, "ai/kiln/KilnException");
  CLASS(g_long, "java/lang/Long");
  CLASS(g_double, "java/lang/Double");
  CLASS(g_string, "java/lang/String");
  CLASS(g_object, "java/lang/Object");
  CLASS(g_ndarray, "ai/kiln/NDArray");
  CLASS(g_module, "ai/kiln/Kiln$Module");   /* every KilnModule is one (the old name, kept) */
  CLASS(g_function, "ai/kiln/Function");
  CLASS(g_device, "ai/kiln/Device");
  CLASS(g_native_handle, "ai/kiln/NativeHandle");
  CLASS(g_illegal_argument, "java/lang/IllegalArgumentException");
  CLASS(g_illegal_state, "java/lang/IllegalStateException");
  CLASS(g_oom, "java/lang/OutOfMemoryError");
  METHOD(g_kiln_exception_init, g_kiln_exception, "<init>",
         "(ILjava/lang/String;Ljava/lang/String;)V");
  STATIC(g_long_value_of, g_long, "valueOf", "(J)Ljava/lang/Long;");
  METHOD(g_long_value, g_long, "longValue", "()J");
  STATIC(g_double_value_of, g_double, "valueOf", "(D)Ljava/lang/Double;");
  METHOD(g_double_value, g_double, "doubleValue", "()D");
  METHOD(g_string_get_bytes, g_string, "getBytes", "(Ljava/lang/String;)[B");
  METHOD(g_string_init_bytes, g_string, "<init>", "([BLjava/lang/String;)V");
  METHOD(g_ndarray_init, g_ndarray, "<init>", "(J[JIIILjava/nio/ByteBuffer;)V");
  METHOD(g_module_init, g_module, "<init>", "(J)V");
  METHOD(g_function_init, g_function, "<init>", "(J)V");
  METHOD(g_device_init, g_device, "<init>", "(II)V");
  METHOD(g_object_to_string, g_object, "toString", "()Ljava/lang/String;");
  STATIC(g_function_dispatch, g_function, "dispatch",
         "(Lai/kiln/Function$Callback;[Ljava/lang/Object;)Ljava/lang/Object;");
  FIELD(g_handle, g_native_handle, "handle", "J");
  FIELD(g_device_type, g_device, "type", "I");
  FIELD(g_device_id, g_device, "id", "I");
#undef CLASS
#undef METHOD
#undef STATIC
#undef FIELD
  jstring utf8 = (*env)->NewStringUTF(env, "UTF-8");
  if (utf8 == NULL) return JNI_ERR;
  g_utf8 = (jstring)(*env)->NewGlobalRef(env, utf8);
  (*env)->DeleteLocalRef(env, utf8);
  /* The functions compiled models with string operators call (this library's runtime copy). */
  if (kiln_strings_register() != KILN_OK) return JNI_ERR;
  return JNI_VERSION_1_8;
}

/* ---- strings ------------------------------------------------------------------------------ */

/* A Java string from NUL-terminated UTF-8 (not JNI's modified UTF-8). NULL with an exception
 * pending on failure. */
static jstring new_string(JNIEnv* env, const char* s) {
  if (s == NULL) s = "";
  jsize n = (jsize)strlen(s);
  jbyteArray bytes = (*env)->NewByteArray(env, n);
  if (bytes == NULL) return NULL;
  (*env)->SetByteArrayRegion(env, bytes, 0, n, (const jbyte*)s);
  jstring str = (jstring)(*env)->NewObject(env, g_string, g_string_init_bytes, bytes, g_utf8);
  if ((*env)->ExceptionCheck(env)) str = NULL;
  (*env)->DeleteLocalRef(env, bytes);
  return str;
}

/* A malloc'd NUL-terminated UTF-8 copy of a Java string; NULL with an exception pending. */
static char* utf8_from_string(JNIEnv* env, jstring str) {
  jbyteArray bytes = (jbyteArray)(*env)->CallObjectMethod(env, str, g_string_get_bytes, g_utf8);
  if ((*env)->ExceptionCheck(env) || bytes == NULL) return NULL;
  jsize n = (*env)->GetArrayLength(env, bytes);
  char* out = (char*)malloc((size_t)n + 1);
  if (out == NULL) {
    (*env)->DeleteLocalRef(env, bytes);
    (*env)->ThrowNew(env, g_oom, "kiln_jni: out of memory copying a string");
    return NULL;
  }
  (*env)->GetByteArrayRegion(env, bytes, 0, n, (jbyte*)out);
  out[n] = '\0';
  (*env)->DeleteLocalRef(env, bytes);
  return out;
}

/* ---- errors ------------------------------------------------------------------------------- */

/* Throws KilnException(status, kiln_status_string(status), kiln_last_error()). */
static void throw_kiln(JNIEnv* env, kiln_status_t status) {
  if ((*env)->ExceptionCheck(env)) return;
  jstring name = new_string(env, kiln_status_string(status));
  if (name == NULL) return;
  jstring message = new_string(env, kiln_last_error());
  if (message == NULL) return;
  jobject ex = (*env)->NewObject(env, g_kiln_exception, g_kiln_exception_init, (jint)status,
                                 name, message);
  if (!(*env)->ExceptionCheck(env) && ex != NULL) (*env)->Throw(env, (jthrowable)ex);
}

/* ---- results: owned runtime values -> Java objects ----------------------------------------- */

/* An NDArray owning the reference `tensor` (released here on failure). */
static jobject new_ndarray(JNIEnv* env, kiln_tensor_t* tensor) {
  DLTensor* dl = kiln_tensor_dltensor(tensor);
  size_t nbytes = kiln_tensor_nbytes(tensor);
  jobject result = NULL;
  jobject buffer = NULL;
  void* data = (char*)dl->data + dl->byte_offset;
  /* A string tensor (docs/strings.md): its buffer is the whole block, the records and the UTF-8
   * bytes after them (NDArray.toStrings decodes it), validated first. */
  if (kiln_str_is_tensor(dl)) {
    const void* block = NULL;
    uint64_t count = 0, block_bytes = 0;
    kiln_status_t st = kiln_str_tensor_block(tensor, &block, &block_bytes, &count);
    if (st != KILN_OK) {
      kiln_tensor_release(tensor);
      throw_kiln(env, st);
      return NULL;
    }
    data = (void*)block;
    nbytes = (size_t)block_bytes;
  }
  jlongArray shape = (*env)->NewLongArray(env, dl->ndim);
  if (shape == NULL) goto done;
  for (int32_t i = 0; i < dl->ndim; ++i) {
    jlong d = (jlong)dl->shape[i];
    (*env)->SetLongArrayRegion(env, shape, i, 1, &d);
  }
  if (nbytes > 0) {
    buffer = (*env)->NewDirectByteBuffer(env, data, (jlong)nbytes);
    if (buffer == NULL) goto done;
  }
  result = (*env)->NewObject(env, g_ndarray, g_ndarray_init, (jlong)(intptr_t)tensor, shape,
                             (jint)dl->dtype.code, (jint)dl->dtype.bits, (jint)dl->dtype.lanes,
                             buffer);
  if ((*env)->ExceptionCheck(env)) result = NULL;
done:
  if (result == NULL) kiln_tensor_release(tensor);
  if (shape != NULL) (*env)->DeleteLocalRef(env, shape);
  if (buffer != NULL) (*env)->DeleteLocalRef(env, buffer);
  return result;
}

/* Converts an owned value into a Java object and releases the value. NULL for a null value
 * (no exception) or on failure (exception pending). Tuples become Object[]. */
static jobject from_owned(JNIEnv* env, kiln_value_t* v) {
  jobject out = NULL;
  switch (v->kind) {
    case KILN_VALUE_NULL:
      return NULL;
    case KILN_VALUE_INT:
      out = (*env)->CallStaticObjectMethod(env, g_long, g_long_value_of, (jlong)v->u.i);
      break;
    case KILN_VALUE_FLOAT:
      out = (*env)->CallStaticObjectMethod(env, g_double, g_double_value_of, (jdouble)v->u.f);
      break;
    case KILN_VALUE_STRING:
      out = new_string(env, v->u.s);
      break;
    case KILN_VALUE_DEVICE:
      out = (*env)->NewObject(env, g_device, g_device_init, (jint)v->u.device.device_type,
                              (jint)v->u.device.device_id);
      break;
    case KILN_VALUE_TENSOR: /* the Java object takes the reference */
      out = new_ndarray(env, v->u.tensor);
      v->kind = KILN_VALUE_NULL;
      return out;
    case KILN_VALUE_MODULE:
      out = (*env)->NewObject(env, g_module, g_module_init, (jlong)(intptr_t)v->u.module);
      if ((*env)->ExceptionCheck(env) || out == NULL) kiln_value_release(v);
      v->kind = KILN_VALUE_NULL;
      return out;
    case KILN_VALUE_FUNCTION:
      out = (*env)->NewObject(env, g_function, g_function_init, (jlong)(intptr_t)v->u.function);
      if ((*env)->ExceptionCheck(env) || out == NULL) kiln_value_release(v);
      v->kind = KILN_VALUE_NULL;
      return out;
    case KILN_VALUE_TUPLE: {
      int32_t n = kiln_tuple_size(v->u.tuple);
      jobjectArray items = (*env)->NewObjectArray(env, n, g_object, NULL);
      for (int32_t i = 0; items != NULL && i < n; ++i) {
        kiln_value_t item = {KILN_VALUE_NULL, {0}};
        kiln_status_t st = kiln_tuple_get_item(v->u.tuple, i, &item);
        if (st != KILN_OK) {
          throw_kiln(env, st);
          items = NULL; /* local ref freed with the frame */
          break;
        }
        jobject obj = from_owned(env, &item);
        if ((*env)->ExceptionCheck(env)) {
          items = NULL;
          break;
        }
        (*env)->SetObjectArrayElement(env, items, i, obj);
        if (obj != NULL) (*env)->DeleteLocalRef(env, obj);
      }
      out = items;
      break;
    }
    default:
      kiln_set_last_error(KILN_ERR_INTERNAL, "kiln_jni: result of unknown value kind");
      throw_kiln(env, KILN_ERR_INTERNAL);
      break;
  }
  kiln_value_release(v);
  if ((*env)->ExceptionCheck(env)) return NULL;
  return out;
}

/* ---- arguments: Java objects -> borrowed runtime values ------------------------------------ */

/* Frees what to_value made for a value (a string copy or a tuple reference). */
static void cleanup_value(kiln_value_t* v) {
  if (v->kind == KILN_VALUE_STRING) free((char*)v->u.s);
  if (v->kind == KILN_VALUE_TUPLE) kiln_tuple_release(v->u.tuple);
  v->kind = KILN_VALUE_NULL;
}

static void cleanup_values(kiln_value_t* values, jsize n) {
  for (jsize i = 0; i < n; ++i) cleanup_value(&values[i]);
}

static int to_values(JNIEnv* env, jobjectArray arr, kiln_value_t* out, jsize n);

/* Converts one argument (as normalised by Function.toNative). Returns 0 with an exception
 * pending on failure, leaving *out null. */
static int to_value(JNIEnv* env, jobject obj, kiln_value_t* out) {
  out->kind = KILN_VALUE_NULL;
  if (obj == NULL) return 1;
  if ((*env)->IsInstanceOf(env, obj, g_native_handle)) {
    void* p = (void*)(intptr_t)(*env)->GetLongField(env, obj, g_handle);
    if (p == NULL) {
      (*env)->ThrowNew(env, g_illegal_state, "kiln_jni: a closed object was passed to the runtime");
      return 0;
    }
    if ((*env)->IsInstanceOf(env, obj, g_ndarray)) {
      out->kind = KILN_VALUE_TENSOR;
      out->u.tensor = (kiln_tensor_t*)p;
    } else if ((*env)->IsInstanceOf(env, obj, g_module)) {
      out->kind = KILN_VALUE_MODULE;
      out->u.module = (kiln_module_t*)p;
    } else {
      out->kind = KILN_VALUE_FUNCTION;
      out->u.function = (kiln_function_t*)p;
    }
    return 1;
  }
  if ((*env)->IsInstanceOf(env, obj, g_long)) {
    out->u.i = (int64_t)(*env)->CallLongMethod(env, obj, g_long_value);
    if ((*env)->ExceptionCheck(env)) return 0;
    out->kind = KILN_VALUE_INT;
    return 1;
  }
  if ((*env)->IsInstanceOf(env, obj, g_double)) {
    out->u.f = (double)(*env)->CallDoubleMethod(env, obj, g_double_value);
    if ((*env)->ExceptionCheck(env)) return 0;
    out->kind = KILN_VALUE_FLOAT;
    return 1;
  }
  if ((*env)->IsInstanceOf(env, obj, g_string)) {
    char* s = utf8_from_string(env, (jstring)obj);
    if (s == NULL) return 0;
    out->u.s = s;
    out->kind = KILN_VALUE_STRING;
    return 1;
  }
  if ((*env)->IsInstanceOf(env, obj, g_device)) {
    out->u.device.device_type = (DLDeviceType)(*env)->GetIntField(env, obj, g_device_type);
    out->u.device.device_id = (int32_t)(*env)->GetIntField(env, obj, g_device_id);
    out->kind = KILN_VALUE_DEVICE;
    return 1;
  }
  jclass object_array = (*env)->FindClass(env, "[Ljava/lang/Object;");
  if (object_array == NULL) return 0;
  jboolean is_array = (*env)->IsInstanceOf(env, obj, object_array);
  (*env)->DeleteLocalRef(env, object_array);
  if (is_array) { /* a tuple */
    jsize n = (*env)->GetArrayLength(env, (jobjectArray)obj);
    kiln_value_t* items = (kiln_value_t*)calloc(n > 0 ? (size_t)n : 1, sizeof(kiln_value_t));
    if (items == NULL) {
      (*env)->ThrowNew(env, g_oom, "kiln_jni: out of memory converting a tuple");
      return 0;
    }
    int ok = to_values(env, (jobjectArray)obj, items, n);
    kiln_tuple_t* tuple = NULL;
    if (ok) {
      kiln_status_t st = kiln_tuple_create(items, (int32_t)n, &tuple);
      if (st != KILN_OK) {
        throw_kiln(env, st);
        ok = 0;
      }
    }
    cleanup_values(items, n);
    free(items);
    if (!ok) return 0;
    out->u.tuple = tuple;
    out->kind = KILN_VALUE_TUPLE;
    return 1;
  }
  (*env)->ThrowNew(env, g_illegal_argument, "kiln_jni: unsupported argument type");
  return 0;
}

/* Converts every element of arr into out[0..n); on failure cleans up and returns 0. */
static int to_values(JNIEnv* env, jobjectArray arr, kiln_value_t* out, jsize n) {
  for (jsize i = 0; i < n; ++i) {
    jobject obj = (*env)->GetObjectArrayElement(env, arr, i);
    int ok = to_value(env, obj, &out[i]);
    if (obj != NULL) (*env)->DeleteLocalRef(env, obj);
    if (!ok) {
      cleanup_values(out, i);
      return 0;
    }
  }
  return 1;
}

/* ---- entry points ------------------------------------------------------------------------- */

#define PTR(type, j) ((type*)(intptr_t)(j))

JNIEXPORT jlong JNICALL Java_ai_kiln_Native_moduleLoad(JNIEnv* env, jclass cls, jstring path) {
  (void)cls;
  char* p = utf8_from_string(env, path);
  if (p == NULL) return 0;
  kiln_module_t* module = NULL;
  kiln_status_t st = kiln_module_load_library(p, &module);
  free(p);
  if (st != KILN_OK) {
    throw_kiln(env, st);
    return 0;
  }
  return (jlong)(intptr_t)module;
}

JNIEXPORT void JNICALL Java_ai_kiln_Native_moduleRelease(JNIEnv* env, jclass cls, jlong m) {
  (void)env, (void)cls;
  kiln_module_release(PTR(kiln_module_t, m));
}

JNIEXPORT jstring JNICALL Java_ai_kiln_Native_moduleKind(JNIEnv* env, jclass cls, jlong m) {
  (void)cls;
  return new_string(env, kiln_module_kind(PTR(kiln_module_t, m)));
}

JNIEXPORT jobjectArray JNICALL Java_ai_kiln_Native_moduleFunctionNames(JNIEnv* env, jclass cls,
                                                                       jlong m) {
  (void)cls;
  kiln_module_t* module = PTR(kiln_module_t, m);
  int32_t n = kiln_module_num_functions(module);
  jobjectArray names = (*env)->NewObjectArray(env, n, g_string, NULL);
  for (int32_t i = 0; names != NULL && i < n; ++i) {
    jstring name = new_string(env, kiln_module_function_name(module, i));
    if (name == NULL) return NULL;
    (*env)->SetObjectArrayElement(env, names, i, name);
    (*env)->DeleteLocalRef(env, name);
  }
  return names;
}

JNIEXPORT jlong JNICALL Java_ai_kiln_Native_moduleGetFunction(JNIEnv* env, jclass cls, jlong m,
                                                              jstring name) {
  (void)cls;
  char* n = utf8_from_string(env, name);
  if (n == NULL) return 0;
  kiln_function_t* function = NULL;
  kiln_status_t st = kiln_module_get_function(PTR(kiln_module_t, m), n, &function);
  free(n);
  if (st != KILN_OK) {
    throw_kiln(env, st);
    return 0;
  }
  return (jlong)(intptr_t)function;
}

JNIEXPORT void JNICALL Java_ai_kiln_Native_functionRelease(JNIEnv* env, jclass cls, jlong f) {
  (void)env, (void)cls;
  kiln_function_release(PTR(kiln_function_t, f));
}

JNIEXPORT jstring JNICALL Java_ai_kiln_Native_functionName(JNIEnv* env, jclass cls, jlong f) {
  (void)cls;
  return new_string(env, kiln_function_name(PTR(kiln_function_t, f)));
}

JNIEXPORT jobject JNICALL Java_ai_kiln_Native_functionCall(JNIEnv* env, jclass cls, jlong f,
                                                           jobjectArray args) {
  (void)cls;
  jsize n = (*env)->GetArrayLength(env, args);
  kiln_value_t stack_args[16];
  kiln_value_t* values = stack_args;
  if (n > 16) {
    values = (kiln_value_t*)calloc((size_t)n, sizeof(kiln_value_t));
    if (values == NULL) {
      (*env)->ThrowNew(env, g_oom, "kiln_jni: out of memory converting arguments");
      return NULL;
    }
  }
  jobject out = NULL;
  if (to_values(env, args, values, n)) {
    kiln_value_t result = {KILN_VALUE_NULL, {0}};
    kiln_status_t st = kiln_function_call(PTR(kiln_function_t, f), values, (int32_t)n, &result);
    cleanup_values(values, n);
    if (st != KILN_OK) {
      throw_kiln(env, st);
    } else {
      out = from_owned(env, &result);
    }
  }
  if (values != stack_args) free(values);
  return out;
}

/* The extents of a Java long[] shape into dims (KILN_MAX_NDIM entries); the count, or -1 with
 * a KilnException pending when there are too many. */
static jsize read_shape(JNIEnv* env, jlongArray shape, int64_t* dims) {
  jsize ndim = (*env)->GetArrayLength(env, shape);
  if (ndim > KILN_MAX_NDIM) {
    kiln_set_last_error(KILN_ERR_INVALID_ARGUMENT, "NDArray: more than 64 dimensions");
    throw_kiln(env, KILN_ERR_INVALID_ARGUMENT);
    return -1;
  }
  for (jsize i = 0; i < ndim; ++i) {
    jlong d;
    (*env)->GetLongArrayRegion(env, shape, i, 1, &d);
    dims[i] = (int64_t)d;
  }
  return ndim;
}

/* A string tensor of `shape` from a block (docs/strings.md) NDArray.fromStrings made: copied
 * and validated by the string library (records inside it, UTF-8). */
JNIEXPORT jobject JNICALL Java_ai_kiln_Native_tensorFromStringBlock(JNIEnv* env, jclass cls,
                                                                    jbyteArray block,
                                                                    jlongArray shape) {
  (void)cls;
  int64_t dims[KILN_MAX_NDIM];
  jsize ndim = read_shape(env, shape, dims);
  if (ndim < 0) return NULL;
  jsize n = (*env)->GetArrayLength(env, block);
  jbyte* bytes = (*env)->GetByteArrayElements(env, block, NULL);
  if (bytes == NULL) return NULL; /* OutOfMemoryError pending */
  kiln_tensor_t* tensor = NULL;
  kiln_status_t st = kiln_str_tensor_from_block(bytes, (uint64_t)n, dims, (int32_t)ndim, &tensor);
  (*env)->ReleaseByteArrayElements(env, block, bytes, JNI_ABORT);
  if (st != KILN_OK) {
    throw_kiln(env, st);
    return NULL;
  }
  return new_ndarray(env, tensor);
}

JNIEXPORT jobject JNICALL Java_ai_kiln_Native_tensorCreate(JNIEnv* env, jclass cls,
                                                           jlongArray shape, jint code,
                                                           jint bits, jint lanes) {
  (void)cls;
  int64_t dims[KILN_MAX_NDIM];
  jsize ndim = read_shape(env, shape, dims);
  if (ndim < 0) return NULL;
  DLDataType dtype = {(uint8_t)code, (uint8_t)bits, (uint16_t)lanes};
  DLDevice cpu = {kDLCPU, 0};
  kiln_tensor_t* tensor = NULL;
  kiln_status_t st = kiln_tensor_create(dims, (int32_t)ndim, dtype, cpu, &tensor);
  if (st != KILN_OK) {
    throw_kiln(env, st);
    return NULL;
  }
  return new_ndarray(env, tensor);
}

JNIEXPORT void JNICALL Java_ai_kiln_Native_tensorRelease(JNIEnv* env, jclass cls, jlong t) {
  (void)env, (void)cls;
  kiln_tensor_release(PTR(kiln_tensor_t, t));
}

/* ---- external functions written in Java ----------------------------------------------------- */

/* The JNIEnv of the calling thread, attaching it when the runtime calls from a native thread;
 * *attached tells the caller to detach afterwards. NULL when the JVM refuses. */
static JNIEnv* callback_env(int* attached) {
  JNIEnv* env = NULL;
  *attached = 0;
  jint rc = (*g_jvm)->GetEnv(g_jvm, (void**)&env, JNI_VERSION_1_8);
  if (rc == JNI_EDETACHED) {
    if ((*g_jvm)->AttachCurrentThread(g_jvm, (void**)&env, NULL) != JNI_OK) return NULL;
    *attached = 1;
  } else if (rc != JNI_OK) {
    return NULL;
  }
  return env;
}

/* The pending Java exception as the runtime's last error (KILN_ERR_RUNTIME), cleared. */
static kiln_status_t exception_to_status(JNIEnv* env, const char* name) {
  jthrowable ex = (*env)->ExceptionOccurred(env);
  (*env)->ExceptionClear(env);
  jstring text = ex ? (jstring)(*env)->CallObjectMethod(env, ex, g_object_to_string) : NULL;
  char* s = NULL;
  if (!(*env)->ExceptionCheck(env) && text != NULL) s = utf8_from_string(env, text);
  (*env)->ExceptionClear(env);
  char message[1024];
  snprintf(message, sizeof message, "%s: %s", name, s ? s : "a Java exception was thrown");
  free(s);
  return kiln_set_last_error(KILN_ERR_RUNTIME, message);
}

/* What a Java external function's runtime function holds: its Callback and its name. */
typedef struct java_extern_t {
  jobject body; /* global reference */
  char name[];  /* for error messages */
} java_extern_t;

/* kiln_callback_fn of a Java external function (ctx: its java_extern_t).
 * Arguments become owned Java objects (closed by Function.dispatch when the callback returns);
 * the result is converted back and copied into *out_result. */
static kiln_status_t java_callback(void* ctx, const kiln_value_t* args, int32_t num_args,
                                   kiln_value_t* out_result) {
  const java_extern_t* ext = ctx;
  int attached;
  JNIEnv* env = callback_env(&attached);
  if (env == NULL) return kiln_set_last_error(KILN_ERR_RUNTIME, "kiln_jni: cannot attach to the JVM");
  kiln_status_t st = KILN_OK;
  jobject result = NULL;
  kiln_value_t v;
  if ((*env)->PushLocalFrame(env, num_args + 8) != JNI_OK) {
    st = exception_to_status(env, ext->name);
    goto detach;
  }
  jobjectArray jargs = (*env)->NewObjectArray(env, num_args, g_object, NULL);
  for (int32_t i = 0; jargs != NULL && i < num_args && !(*env)->ExceptionCheck(env); ++i) {
    kiln_value_t copy = {KILN_VALUE_NULL, {0}};
    st = kiln_value_copy(&args[i], &copy);
    if (st != KILN_OK) goto pop;
    jobject obj = from_owned(env, &copy);
    if (obj != NULL) (*env)->SetObjectArrayElement(env, jargs, i, obj);
  }
  if (!(*env)->ExceptionCheck(env))
    result = (*env)->CallStaticObjectMethod(env, g_function, g_function_dispatch, ext->body, jargs);
  if ((*env)->ExceptionCheck(env)) {
    st = exception_to_status(env, ext->name);
    goto pop;
  }
  if (!to_value(env, result, &v)) {
    st = exception_to_status(env, ext->name);
    goto pop;
  }
  st = kiln_value_copy(&v, out_result);
  cleanup_value(&v);
pop:
  (*env)->PopLocalFrame(env, NULL);
detach:
  if (attached) (*g_jvm)->DetachCurrentThread(g_jvm);
  return st;
}

static void java_callback_delete(void* ctx) {
  java_extern_t* ext = ctx;
  int attached;
  JNIEnv* env = callback_env(&attached);
  if (env != NULL) { /* else the JVM is gone, and the reference with it */
    (*env)->DeleteGlobalRef(env, ext->body);
    if (attached) (*g_jvm)->DetachCurrentThread(g_jvm);
  }
  free(ext);
}

JNIEXPORT void JNICALL Java_ai_kiln_Native_functionRegister(JNIEnv* env, jclass cls, jstring name,
                                                            jobject body, jboolean override) {
  (void)cls;
  char* n = utf8_from_string(env, name);
  if (n == NULL) return;
  java_extern_t* ext = (java_extern_t*)malloc(sizeof(java_extern_t) + strlen(n) + 1);
  if (ext != NULL) {
    strcpy(ext->name, n);
    ext->body = (*env)->NewGlobalRef(env, body);
  }
  kiln_function_t* function = NULL;
  kiln_status_t st = ext && ext->body
                         ? kiln_function_create(n, java_callback, ext, java_callback_delete, &function)
                         : kiln_set_last_error(KILN_ERR_OUT_OF_MEMORY, "kiln_jni: out of memory registering");
  if (st != KILN_OK && ext != NULL) {
    if (ext->body != NULL) (*env)->DeleteGlobalRef(env, ext->body);
    free(ext);
  }
  if (st == KILN_OK) {
    st = kiln_register_function(n, function, override ? 1 : 0);
    kiln_function_release(function); /* the registry holds its own reference */
  }
  free(n);
  if (st != KILN_OK) throw_kiln(env, st);
}

JNIEXPORT void JNICALL Java_ai_kiln_Native_functionUnregister(JNIEnv* env, jclass cls, jstring name) {
  (void)cls;
  char* n = utf8_from_string(env, name);
  if (n == NULL) return;
  kiln_status_t st = kiln_unregister_function(n);
  free(n);
  if (st != KILN_OK) throw_kiln(env, st);
}
