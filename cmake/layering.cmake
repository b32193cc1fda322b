# The dependency order of the layers, enforced by the build (docs/architecture.md §1).
# For each library, a probe executable links every object of that library (whole
# archive) against only the libraries it declares. A call into a layer it does not
# link — a wrong-way include whose code is used — leaves an undefined symbol and the
# build fails, naming it. The probes are part of the default build.
function(olmo2_layer_probe library)
  add_executable(olmo2_layer_probe_${library} ${CMAKE_SOURCE_DIR}/cmake/layer_probe.cpp)
  target_link_libraries(olmo2_layer_probe_${library} PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,${library}>")
  set_target_properties(olmo2_layer_probe_${library} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/layer_probes)
endfunction()

foreach(lib olmo2_ops olmo2_parallel olmo2_monitoring olmo2_io olmo2_model olmo2_trace olmo2_tokenizer
            olmo2_structured olmo2_structured_vocab olmo2_generation olmo2_train olmo2_serve olmo2_http olmo2_chat_template olmo2_openai_api
            olmo2_launcher)
  olmo2_layer_probe(${lib})
endforeach()
