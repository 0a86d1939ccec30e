
// Appended to the engine's glue by scripts/build-npm.sh: a freed `Survey` (by `free()`,
// `[Symbol.dispose]()` or the end of a `using` block) frees nothing a second time, and any
// other use throws `CrosstabError` `survey_freed` instead of wasm-bindgen's own
// "null pointer passed to rust". `crosstabError` is the glue's import of js/error.js.
{
  const freed = () =>
    crosstabError("survey_freed", "this Survey was freed (by free() or the end of a using block): load the survey again to use it.");
  const proto = Survey.prototype;
  const free = proto.free;
  proto.free = function () {
    if (this.__wbg_ptr !== 0) free.call(this);
  };
  if (Symbol.dispose) proto[Symbol.dispose] = proto.free;
  for (const name of Object.getOwnPropertyNames(proto)) {
    if (name === "constructor" || name === "free" || name.startsWith("__")) continue;
    const descriptor = Object.getOwnPropertyDescriptor(proto, name);
    if (typeof descriptor.value === "function") {
      const method = descriptor.value;
      descriptor.value = {
        [name](...args) {
          if (this.__wbg_ptr === 0) throw freed();
          return method.apply(this, args);
        },
      }[name];
    } else if (descriptor.get) {
      const get = descriptor.get;
      descriptor.get = function () {
        if (this.__wbg_ptr === 0) throw freed();
        return get.call(this);
      };
    }
    Object.defineProperty(proto, name, descriptor);
  }
}
