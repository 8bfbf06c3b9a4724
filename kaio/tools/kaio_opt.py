"""``kaio-opt``: xDSL's optimizer driver with kaio's dialects, passes and ``ptx`` target.

    kaio-opt kernel.mlir -p "canonicalize,cse,lower-to-ptx{arch=sm_90}" -t ptx{arch=sm_90}
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.xdsl_opt_main import xDSLOptMain

from kaio.universe import KAIO_UNIVERSE


class KaioOptMain(xDSLOptMain):
    def register_all_dialects(self) -> None:
        super().register_all_dialects()
        for name, factory in KAIO_UNIVERSE.all_dialects.items():
            if name not in self.ctx.registered_dialect_names:
                self.ctx.register_dialect(name, factory)

    def register_all_passes(self) -> None:
        super().register_all_passes()
        for name, factory in KAIO_UNIVERSE.all_passes.items():
            if name not in self.available_passes:
                self.register_pass(name, factory)

    def register_all_targets(self) -> None:
        super().register_all_targets()
        for name, factory in KAIO_UNIVERSE.all_targets.items():
            self.available_targets.setdefault(name, factory)


def main(args: Sequence[str] | None = None) -> None:
    KaioOptMain(description="kaio modular optimizer driver", args=args).run()


if __name__ == "__main__":
    main()
