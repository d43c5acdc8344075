// Real C++ terminate paths, called from Python via ctypes (test-input generator only).
#include <c10/util/Exception.h>
#include <stdexcept>
#include <thread>
#include <string>
#include <chrono>

extern "C" {
// an uncaught std::runtime_error in a background thread: terminate + what()
void throw_runtime_error_in_thread(const char* msg) {
  std::string m(msg);
  std::thread t([m]() { throw std::runtime_error(m); });
  t.join();
}
// an uncaught non-std::exception (no what() line)
void throw_int_in_thread() {
  std::thread t([]() { throw 42; });
  t.join();
}
// a joinable std::thread destroyed: terminate called without an active exception
void destroy_joinable_thread() {
  std::thread* t = new std::thread([]() { std::this_thread::sleep_for(std::chrono::seconds(30)); });
  std::thread moved(std::move(*t));
  (void)moved;
}
// c10::DistBackendError thrown from a background thread, as ProcessGroupNCCL's watchdog does
void throw_dist_backend_error_in_thread(const char* msg) {
  std::string m(msg);
  std::thread t([m]() { C10_THROW_ERROR(DistBackendError, m); });
  t.join();
}
}
