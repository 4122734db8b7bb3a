# The library's layers, lowest first. Each folder of src/ is one static library, okapi_<folder>,
# linked to the folders it names here (never to one later in the list, so there are no cycles).
# A file may include headers of its own folder and of every folder its folder reaches through
# these links; cmake/check_layers.cmake fails the build otherwise. A folder that does not exist
# (yet) is skipped. Third-party libraries are named by the one folder that uses them.
set(OKAPI_LAYERS core dist format hub kernels exact kv tokenizer sample grammar jinja chat quantize model backend runtime compress eval
                 train server synth)

set(OKAPI_LAYER_DEPS_core)
set(OKAPI_LAYER_DEPS_dist core)
set(OKAPI_LAYER_DEPS_format core)
set(OKAPI_LAYER_DEPS_hub core)
set(OKAPI_LAYER_DEPS_kernels core)
set(OKAPI_LAYER_DEPS_exact core)
set(OKAPI_LAYER_DEPS_kv core exact kernels)
set(OKAPI_LAYER_DEPS_tokenizer core format)
set(OKAPI_LAYER_DEPS_sample core)
set(OKAPI_LAYER_DEPS_grammar core tokenizer)
set(OKAPI_LAYER_DEPS_jinja core)
set(OKAPI_LAYER_DEPS_chat core jinja grammar)
set(OKAPI_LAYER_DEPS_quantize core format kernels)
set(OKAPI_LAYER_DEPS_model core format exact kernels kv)
set(OKAPI_LAYER_DEPS_backend model)
set(OKAPI_LAYER_DEPS_runtime model backend tokenizer sample grammar jinja chat dist)
set(OKAPI_LAYER_DEPS_compress model backend tokenizer)
set(OKAPI_LAYER_DEPS_eval runtime compress quantize)
set(OKAPI_LAYER_DEPS_train runtime dist)
set(OKAPI_LAYER_DEPS_server runtime)
set(OKAPI_LAYER_DEPS_synth format kernels quantize)

# Reaches the folders `layer` may include, itself excluded, into `out`.
function(okapi_layer_closure layer out)
  set(reached)
  set(pending ${OKAPI_LAYER_DEPS_${layer}})
  while(pending)
    list(POP_FRONT pending dep)
    if(NOT dep IN_LIST reached)
      list(APPEND reached ${dep})
      list(APPEND pending ${OKAPI_LAYER_DEPS_${dep}})
    endif()
  endwhile()
  set(${out} ${reached} PARENT_SCOPE)
endfunction()
