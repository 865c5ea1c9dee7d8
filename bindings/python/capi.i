/* pulseinfer.capi: the C ABI of libpulseinfer as SWIG generates it from pulseinfer.h itself.
 *
 * What this file adds to the header, and nothing more:
 * - Errors raise. A pulse_status other than PULSE_OK and PULSE_BUFFER_TOO_SMALL (the answer to a
 *   size query) raises the pulseinfer.PulseError subclass of that status, with pulse_last_error()
 *   read in C right after the call, on the same thread.
 * - Out-parameters are returned after the status: status, model = pulse_model_load(path, params).
 * - Token ids come in as any sequence of ints; text as str (encoded to UTF-8) or bytes-like; an
 *   output buffer is a writable buffer (bytearray for text, array('i') for token ids), or None
 *   for the size query.
 * - Structs are made by their Python constructor only: parameter structs filled by their *_init,
 *   output structs with struct_size set; struct_size is read-only. The pointer fields of
 *   parameter structs own copies of what they are set to.
 * - Token callbacks are not offered (the package streams by polling), so pulse_request_submit*
 *   take no callback and user_data.
 * - The GIL is released during every call into the library.
 */
%module(package="pulseinfer", threads="1") capi

%feature("autodoc", "1");

%{
#include <pulseinfer/pulseinfer.h>
#include <stdlib.h>
#include <string.h>

/* Sets the Python exception of `status`, with this thread's last error message. */
static void pulse_py_set_error(pulse_status status) {
  const char* last_error = pulse_last_error();
  PyObject* message = PyUnicode_DecodeUTF8(last_error, (Py_ssize_t)strlen(last_error), "replace");
  if (message == NULL) return;
  PyObject* errors = PyImport_ImportModule("pulseinfer._errors");
  PyObject* error =
      errors != NULL ? PyObject_CallMethod(errors, "error_for", "iO", (int)status, message) : NULL;
  Py_XDECREF(errors);
  Py_DECREF(message);
  if (error == NULL) return;
  PyErr_SetObject((PyObject*)Py_TYPE(error), error);
  Py_DECREF(error);
}

/* A malloc'ed copy of `text` (NULL for NULL); NULL with MemoryError set when out of memory. */
static char* pulse_py_strdup(const char* text) {
  if (text == NULL) return NULL;
  const size_t size = strlen(text) + 1;
  char* copy = (char*)malloc(size);
  if (copy == NULL) return (char*)PyErr_NoMemory();
  return (char*)memcpy(copy, text, size);
}

/* A str as UTF-8 for a NUL-terminated char*; NULL with an exception when it is not one. */
static const char* pulse_py_c_string(PyObject* object) {
  Py_ssize_t size = 0;
  const char* text = PyUnicode_AsUTF8AndSize(object, &size);
  if (text != NULL && strlen(text) != (size_t)size) {
    PyErr_SetString(PyExc_ValueError, "the string holds a NUL character");
    return NULL;
  }
  return text;
}

/* Copies a sequence of ints into a new int32 array (NULL when empty). Returns 0 with an
 * exception set when it cannot. */
static int pulse_py_token_array(PyObject* input, int32_t** out, size_t* count) {
  PyObject* items = PySequence_Fast(input, "expected a sequence of token ids");
  if (items == NULL) return 0;
  const size_t size = (size_t)PySequence_Fast_GET_SIZE(items);
  int32_t* ids = size > 0 ? (int32_t*)malloc(size * sizeof(int32_t)) : NULL;
  int ok = size == 0 || ids != NULL;
  if (!ok) PyErr_NoMemory();
  for (size_t i = 0; ok && i < size; ++i) {
    const long value = PyLong_AsLong(PySequence_Fast_GET_ITEM(items, i));
    ok = !(value == -1 && PyErr_Occurred());
    if (ok && (value < INT32_MIN || value > INT32_MAX)) {
      PyErr_Format(PyExc_OverflowError, "token id %ld does not fit in int32", value);
      ok = 0;
    }
    if (ok) ids[i] = (int32_t)value;
  }
  Py_DECREF(items);
  if (!ok) {
    free(ids);
    return 0;
  }
  *out = ids;
  *count = size;
  return 1;
}

static void pulse_py_free_strings(char** strings, size_t count) {
  for (size_t i = 0; strings != NULL && i < count; ++i) free(strings[i]);
  free(strings);
}

/* Copies a sequence of str into a new array of malloc'ed UTF-8 strings (NULL when empty).
 * Returns 0 with an exception set when it cannot. */
static int pulse_py_string_array(PyObject* input, char*** out, size_t* count) {
  if (PyUnicode_Check(input)) {
    PyErr_SetString(PyExc_TypeError, "expected a sequence of str, not one str");
    return 0;
  }
  PyObject* items = PySequence_Fast(input, "expected a sequence of str");
  if (items == NULL) return 0;
  const size_t size = (size_t)PySequence_Fast_GET_SIZE(items);
  char** strings = size > 0 ? (char**)calloc(size, sizeof(char*)) : NULL;
  int ok = size == 0 || strings != NULL;
  if (!ok) PyErr_NoMemory();
  for (size_t i = 0; ok && i < size; ++i) {
    const char* text = pulse_py_c_string(PySequence_Fast_GET_ITEM(items, i));
    strings[i] = text != NULL ? pulse_py_strdup(text) : NULL;
    ok = strings[i] != NULL;
  }
  Py_DECREF(items);
  if (!ok) {
    pulse_py_free_strings(strings, size);
    return 0;
  }
  *out = strings;
  *count = size;
  return 1;
}
%}

%include <stdint.i>
%include <typemaps.i>

/* ---- statuses ---------------------------------------------------------------------------- */

%typemap(out) pulse_status {
  if ($1 != PULSE_OK && $1 != PULSE_BUFFER_TOO_SMALL) {
    pulse_py_set_error($1);
    SWIG_fail;
  }
  $result = PyLong_FromLong($1);
}
/* A field holding a status is a value, not a failure of the call reading it. */
%typemap(out) pulse_status error = int;

/* ---- out-parameters ---------------------------------------------------------------------- */

%apply uint64_t* OUTPUT { uint64_t* out_id };
%apply size_t* OUTPUT { size_t* out_count, size_t* out_len };
%apply int32_t* OUTPUT { pulse_request_state* out_state };

%typemap(in, numinputs=0) pulse_model** out_model (pulse_model* handle = NULL),
                          pulse_engine** out_engine (pulse_engine* handle = NULL) {
  $1 = &handle;
}
%typemap(argout) pulse_model** out_model, pulse_engine** out_engine {
  $result = SWIG_Python_AppendOutput($result, SWIG_NewPointerObj(handle$argnum, $*1_descriptor, 0));
}

/* ---- token ids and text in --------------------------------------------------------------- */

%typemap(in) (const int32_t* tokens, size_t count) {
  int32_t* ids = NULL;
  if (!pulse_py_token_array($input, &ids, &$2)) SWIG_fail;
  $1 = ids;
}
%typemap(freearg) (const int32_t* tokens, size_t count) {
  free((void*)$1);
}

%typemap(in) (const char* text, size_t text_len) (Py_buffer view = {0}) {
  if (PyUnicode_Check($input)) {
    Py_ssize_t size = 0;
    $1 = ($1_ltype)PyUnicode_AsUTF8AndSize($input, &size);
    if ($1 == NULL) SWIG_fail;
    $2 = (size_t)size;
  } else {
    if (PyObject_GetBuffer($input, &view, PyBUF_SIMPLE) != 0) SWIG_fail;
    $1 = ($1_ltype)view.buf;
    $2 = (size_t)view.len;
  }
}
%typemap(freearg) (const char* text, size_t text_len) {
  if (view$argnum.obj != NULL) PyBuffer_Release(&view$argnum);
}

%typemap(in) (const pulse_chat_message* messages, size_t count) (PyObject* items = NULL) {
  items = PySequence_Fast($input, "expected a sequence of (role, content) tuples");
  if (items == NULL) SWIG_fail;
  $2 = (size_t)PySequence_Fast_GET_SIZE(items);
  pulse_chat_message* messages = (pulse_chat_message*)calloc($2 > 0 ? $2 : 1, sizeof(*messages));
  if (messages == NULL) {
    PyErr_NoMemory();
    SWIG_fail;
  }
  $1 = messages;
  for (size_t i = 0; i < $2; ++i) {
    PyObject* role = NULL;
    PyObject* content = NULL;
    if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(items, i), "UU;a message is (role, content)",
                          &role, &content)) {
      SWIG_fail;
    }
    messages[i].role = pulse_py_c_string(role);
    messages[i].content = pulse_py_c_string(content);
    if (messages[i].role == NULL || messages[i].content == NULL) SWIG_fail;
  }
}
%typemap(freearg) (const pulse_chat_message* messages, size_t count) {
  free((void*)$1);
  Py_XDECREF(items$argnum);
}

/* ---- output buffers (None for the size query) -------------------------------------------- */

%typemap(in) (int32_t* tokens, size_t capacity) (Py_buffer view = {0}) {
  $1 = NULL;
  $2 = 0;
  if ($input != Py_None) {
    if (PyObject_GetBuffer($input, &view, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) !=
        0) {
      SWIG_fail;
    }
    const char* format = strchr("@=", view.format[0]) != NULL ? view.format + 1 : view.format;
    if (view.itemsize != sizeof(int32_t) || strcmp(format, "i") != 0) {
      PyErr_SetString(PyExc_TypeError, "expected a writable int32 buffer, such as array('i')");
      SWIG_fail;
    }
    $1 = (int32_t*)view.buf;
    $2 = (size_t)view.len / sizeof(int32_t);
  }
}
%typemap(in) (char* text, size_t capacity) (Py_buffer view = {0}) {
  $1 = NULL;
  $2 = 0;
  if ($input != Py_None) {
    if (PyObject_GetBuffer($input, &view, PyBUF_WRITABLE) != 0) SWIG_fail;
    $1 = (char*)view.buf;
    $2 = (size_t)view.len;
  }
}
%typemap(freearg) (int32_t* tokens, size_t capacity), (char* text, size_t capacity) {
  if (view$argnum.obj != NULL) PyBuffer_Release(&view$argnum);
}

/* ---- structs ----------------------------------------------------------------------------- */

%immutable struct_size;
/* The strings of pulse_model_info are the model's. */
%immutable pulse_model_info::architecture;
%immutable pulse_model_info::format;
%immutable pulse_model_info::stored_type;
%immutable pulse_model_info::weight_type;
%immutable pulse_model_info::backend;
%immutable pulse_model_info::tokenizer;
%immutable pulse_model_info::chat_template;
/* The constructors run them, with the struct's real size. */
%ignore pulse_model_params_init;
%ignore pulse_engine_params_init;
%ignore pulse_sampling_params_init;

%define PULSE_PARAMS(TYPE)
%extend TYPE {
  TYPE() {
    TYPE* params = (TYPE*)calloc(1, sizeof(TYPE));
    if (params != NULL) TYPE##_init(params, sizeof(TYPE));
    return params;
  }
}
%enddef

%define PULSE_OUTPUT(TYPE)
%extend TYPE {
  TYPE() {
    TYPE* output = (TYPE*)calloc(1, sizeof(TYPE));
    if (output != NULL) output->struct_size = sizeof(TYPE);
    return output;
  }
}
%enddef

PULSE_PARAMS(pulse_engine_params)
PULSE_PARAMS(pulse_sampling_params)
PULSE_OUTPUT(pulse_model_info)
PULSE_OUTPUT(pulse_step_report)
PULSE_OUTPUT(pulse_engine_stats)
PULSE_OUTPUT(pulse_request_stats)

/* The strings of pulse_model_params are copies it owns (the defaults too), so that it frees
 * only its own. A copy is made while the GIL is held; the setter adopts it. */
%typemap(in) const char* backend, const char* weight_type {
  const char* text = $input == Py_None ? NULL : pulse_py_c_string($input);
  if (text == NULL && $input != Py_None) SWIG_fail;
  $1 = pulse_py_strdup(text);
  if ($1 == NULL && text != NULL) SWIG_fail;
}
%typemap(memberin) const char* backend, const char* weight_type {
  free((char*)$1);
  $1 = $input;
}
%extend pulse_model_params {
  pulse_model_params() {
    pulse_model_params* params = (pulse_model_params*)calloc(1, sizeof(pulse_model_params));
    if (params == NULL) return NULL;
    pulse_model_params_init(params, sizeof(*params));
    const char* backend = params->backend;
    const char* weight_type = params->weight_type;
    params->backend = backend != NULL ? strdup(backend) : NULL;
    params->weight_type = weight_type != NULL ? strdup(weight_type) : NULL;
    if ((backend != NULL && params->backend == NULL) ||
        (weight_type != NULL && params->weight_type == NULL)) {
      free((char*)params->backend);
      free((char*)params->weight_type);
      free(params);
      return NULL;
    }
    return params;
  }
  ~pulse_model_params() {
    free((char*)$self->backend);
    free((char*)$self->weight_type);
    free($self);
  }
}

/* The stop lists of pulse_sampling_params are copies it owns, replaced by its set_* methods.
 * The copies are made while the GIL is held; the methods adopt them. */
%ignore pulse_sampling_params::stop_token_ids;
%ignore pulse_sampling_params::stop_strings;
%immutable pulse_sampling_params::stop_token_count;
%immutable pulse_sampling_params::stop_string_count;
%typemap(in) (int32_t* adopted_tokens, size_t count) {
  if (!pulse_py_token_array($input, &$1, &$2)) SWIG_fail;
}
%typemap(in) (char** adopted_strings, size_t count) {
  if (!pulse_py_string_array($input, &$1, &$2)) SWIG_fail;
}
%extend pulse_sampling_params {
  ~pulse_sampling_params() {
    free((void*)$self->stop_token_ids);
    pulse_py_free_strings((char**)$self->stop_strings, $self->stop_string_count);
    free($self);
  }
  void set_stop_token_ids(int32_t* adopted_tokens, size_t count) {
    free((void*)$self->stop_token_ids);
    $self->stop_token_ids = adopted_tokens;
    $self->stop_token_count = count;
  }
  void set_stop_strings(char** adopted_strings, size_t count) {
    pulse_py_free_strings((char**)$self->stop_strings, $self->stop_string_count);
    $self->stop_strings = (const char* const*)adopted_strings;
    $self->stop_string_count = count;
  }
}

/* ---- not offered ------------------------------------------------------------------------- */

%typemap(in, numinputs=0) (pulse_token_callback callback, void* user_data) {
  $1 = NULL;
  $2 = NULL;
}
%ignore pulse_token_event;
%ignore pulse_chat_message;
/* The package holds one reference per handle and frees it once. */
%ignore pulse_model_retain;

/* Flags whose casts SWIG cannot evaluate: the C compiler takes their values from the header. */
%constant uint64_t PULSE_FEATURE_CPU = PULSE_FEATURE_CPU;
%constant uint64_t PULSE_FEATURE_CUDA_COMPILED = PULSE_FEATURE_CUDA_COMPILED;
%constant uint64_t PULSE_FEATURE_CUDA_DEVICE = PULSE_FEATURE_CUDA_DEVICE;
%constant uint32_t PULSE_TOKENIZE_ADD_SPECIAL = PULSE_TOKENIZE_ADD_SPECIAL;
%constant uint32_t PULSE_TOKENIZE_PARSE_SPECIAL = PULSE_TOKENIZE_PARSE_SPECIAL;
%constant uint32_t PULSE_TOKENIZE_DEFAULT = PULSE_TOKENIZE_DEFAULT;
%constant uint32_t PULSE_DETOKENIZE_RENDER_SPECIAL = PULSE_DETOKENIZE_RENDER_SPECIAL;

%include <pulseinfer/pulseinfer.h>
