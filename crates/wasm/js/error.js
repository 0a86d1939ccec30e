// The class of every error this package throws, exported from it as `CrosstabError`.
// The engine and the validator-only entries each carry a copy of this module, and an app
// may bundle two copies of the package, so `instanceof` checks a brand kept in the global
// symbol registry rather than one copy's prototype: an error from any copy is an instance
// of every copy's class. A subclass's `instanceof` is the ordinary one.
const BRAND = Symbol.for("crosstab-wasm.CrosstabError");

export class CrosstabError extends Error {
  constructor(code, message) {
    super(message);
    this.name = "CrosstabError";
    this.code = code;
  }

  static [Symbol.hasInstance](value) {
    if (this !== CrosstabError) return Function.prototype[Symbol.hasInstance].call(this, value);
    if (typeof value !== "object" || value === null) return false;
    // The prototype chain, as the ordinary `instanceof` walks it: no member is read, so
    // neither a getter nor a Proxy's `get` trap runs or can pass a value off as one.
    for (let proto = Object.getPrototypeOf(value); proto !== null; proto = Object.getPrototypeOf(proto)) {
      if (Object.prototype.hasOwnProperty.call(proto, BRAND)) return true;
    }
    return false;
  }
}
Object.defineProperty(CrosstabError.prototype, BRAND, { value: true });

export function crosstabError(code, message) {
  return new CrosstabError(code, message);
}
