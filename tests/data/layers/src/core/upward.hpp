// A core header that includes a higher layer: cmake/check_layers.cmake must reject it
// (tests/CMakeLists.txt, layers_check_rejects_upward_include).
#pragma once
#include "core/error.hpp"
#include "model/model.hpp"
