// A shared library without a sandboxd descriptor section.
extern "C" int not_a_plugin_answer() {
  return 42;
}
