"""Version changes in the registry (sync ORM): record, promote, roll back, and the switch once a target is warm.

The registered model's own source, revision, dtype and backend always say what will be
live once any switch in progress is done (the target, else the live version); a canary or
shadow candidate lives in its ModelVersion row only, so an edit of other fields never
makes a version by accident.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from models_registry.core.errors import InvalidInput
from models_registry.models import ModelVersion, RegisteredModel
from models_registry.models.registered import VERSION_FIELDS
from models_registry.catalog import output_shape
from models_registry.catalog.rollout import CANARY, SHADOW


def _store(model: RegisteredModel) -> None:
    """Save the version fields and what the model computes (a plain save leaves the version fields alone)."""
    model.save(update_fields=[*VERSION_FIELDS, "source", "revision", "dtype", "backend", "updated_at"])


def _version(model: RegisteredModel, number: int) -> ModelVersion | None:
    return model.versions.filter(number=number).first() if number else None


def _adopt(model: RegisteredModel, version: ModelVersion | None) -> None:
    """The model's own fields say what version will be live."""
    if version is not None:
        model.source, model.revision, model.dtype, model.backend = version.compute_key()


def _clear_candidate(model: RegisteredModel) -> None:
    model.candidate_version, model.candidate_mode, model.candidate_percent, model.candidate_sticky = 0, "", 0, False


def record(model: RegisteredModel, mode: str = "", percent: int = 0, sticky: bool = False,
           allow_shape_change: bool = False) -> ModelVersion | None:
    """After model (saved) was registered or edited: the new version its fields make, if they changed what it computes.

    With no live version it goes live at once (it loads: 503 until then); else it becomes
    the target (it goes live once warm everywhere), or with mode the canary or shadow
    candidate beside live. None when nothing changed. A version whose answers would look
    unlike live's (catalog.output_shape) is refused (InvalidInput naming both shapes)
    unless allow_shape_change; the same version again with it allowed is made anew.
    """
    if mode not in ("", CANARY, SHADOW):
        raise InvalidInput(f"unknown candidate mode {mode!r}")
    if mode and not 0 <= percent <= 100:
        raise InvalidInput("the candidate's percent must be 0 to 100")
    with transaction.atomic():
        model = RegisteredModel.objects.select_for_update().get(pk=model.pk)
        current = _version(model, model.target_version or model.live_version)
        candidate = _version(model, model.candidate_version)
        if mode and _same(candidate, model, allow_shape_change):
            # The same candidate again (idempotent): its share, mode or stickiness may change.
            model.candidate_mode, model.candidate_percent, model.candidate_sticky = mode, percent, sticky
            _adopt(model, current)
            _store(model)
            return None
        if _same(current, model, allow_shape_change and current is not None and current.number != model.live_version):
            return None
        number = _next_number(model)
        problem = None if allow_shape_change else shape_problem(model, model.compute_key())
        if problem:
            raise InvalidInput(problem)
        version = ModelVersion.objects.create(model=model, number=number, source=model.source,
                                              revision=model.revision, dtype=model.dtype, backend=model.backend,
                                              allow_shape_change=allow_shape_change)
        if not model.live_version:
            model.live_version = number
            version.live_since = timezone.now()
            version.save(update_fields=["live_since"])
        elif mode:
            model.candidate_version, model.candidate_mode = number, mode
            model.candidate_percent, model.candidate_sticky = percent, sticky
            _adopt(model, current)  # the candidate is not what will be live
        else:
            model.target_version = number
        _store(model)
        return version


def shape_problem(model: RegisteredModel, key: tuple[str, str, str, str]) -> str | None:
    """Why a version of model computing key would be refused (its answers look unlike live's); None: it would not."""
    live = _version(model, model.live_version)
    if live is None or live.compute_key() == key:
        return None
    kinds = list(model.tasks.values_list("task", flat=True))
    return output_shape.change(live.compute_key(), key, kinds, live.number, _next_number(model))


def _next_number(model: RegisteredModel) -> int:
    return (model.versions.order_by("-number").values_list("number", flat=True).first() or 0) + 1


def _same(version: ModelVersion | None, model: RegisteredModel, allowed: bool) -> bool:
    """Whether version computes what model's fields say, and allows a shape change if one is asked for."""
    return version is not None and version.compute_key() == model.compute_key() and (
        version.allow_shape_change or not allowed)


def promote(name: str) -> int:
    """Make the candidate the target (it goes live once warm everywhere: at once if it is); its number."""
    with transaction.atomic():
        model = _locked(name)
        if not model.candidate_version:
            raise InvalidInput(f"model {name!r} has no canary or shadow version to promote")
        model.target_version = model.candidate_version
        _adopt(model, _version(model, model.target_version))
        _clear_candidate(model)
        _store(model)
        return model.target_version


def rollback(name: str) -> str:
    """Drop the candidate; else stop a switch to a version never live; else go back one version in the history.

    The history is the versions that went live, each rolled back from leaves it (rolled_back):
    a rollback goes to the last version live before the one live now (or before the one a
    rollback in progress goes back to), skipping copies of it (Load now's), and never forward:
    two rollbacks go back two versions. What was done.
    """
    with transaction.atomic():
        model = _locked(name)
        target = _version(model, model.target_version)
        if model.candidate_version:
            done = f"dropped candidate v{model.candidate_version}"
            _clear_candidate(model)
        elif target is not None and target.live_since is None:
            done = f"stopped the switch to v{model.target_version}; v{model.live_version} stays live"
            model.target_version = 0
            _adopt(model, _version(model, model.live_version))
        else:
            done = _back_one(model, target or _version(model, model.live_version))
        _store(model)
        return done


def _back_one(model: RegisteredModel, current: ModelVersion | None) -> str:
    """Make the version live before current the target, marking current (and copies of it) rolled back."""
    if current is None or current.live_since is None:
        raise InvalidInput(f"model {model.name!r} has no candidate and no previous version to roll back to")
    earlier = model.versions.filter(live_since__lt=current.live_since, rolled_back=False).order_by("-live_since")
    leaving = [current]
    for version in earlier:
        if version.compute_key() != current.compute_key():
            break
        leaving.append(version)  # a copy of what is left: going back to it changes nothing
    else:
        raise InvalidInput(f"model {model.name!r} has no candidate and no previous version to roll back to "
                           f"(v{current.number} is the oldest left in its history)")
    ModelVersion.objects.filter(pk__in=[v.pk for v in leaving]).update(rolled_back=True)
    model.target_version = 0 if version.number == model.live_version else version.number
    _adopt(model, version)
    return f"going back to v{version.number} (live once warm)"


def reload(name: str) -> str:
    """"Load now" without an outage: a fresh copy of what will be live becomes the target. What was done.

    The copy (a new version number, what it computes unchanged) loads beside the live one on
    every worker holding the model and takes over once warm on all of them, as any new
    version does; the replaced copy is unloaded once its requests are answered. A canary or
    shadow candidate is copied afresh too. A model without versions (made straight in the
    database) reloads in place: its load generation is bumped, and it answers 503 while it loads.
    """
    with transaction.atomic():
        model = _locked(name)
        if not model.enabled:
            return "disabled: nothing to reload (it loads when enabled)"
        if not model.live_version:
            RegisteredModel.objects.filter(pk=model.pk).update(load_generation=F("load_generation") + 1)
            return "will be reloaded in place (no versions: 503 while it loads)"
        base = model.target_version or model.live_version
        model.target_version = _copy(model, base).number
        done = f"v{model.target_version} (a fresh copy of v{base}) loads beside v{model.live_version}"
        if model.candidate_version:
            old = model.candidate_version
            model.candidate_version = _copy(model, old).number
            done += f"; the {model.candidate_mode} v{old} is copied afresh as v{model.candidate_version}"
        _store(model)
        return done + "; it will be reloaded with no outage: live once warm on every worker"


def _copy(model: RegisteredModel, number: int) -> ModelVersion:
    """A new version computing what version number does."""
    source = model.versions.get(number=number)
    return ModelVersion.objects.create(model=model, number=_next_number(model), source=source.source,
                                       revision=source.revision, dtype=source.dtype, backend=source.backend,
                                       reload_of=number)


def _locked(name: str) -> RegisteredModel:
    model = RegisteredModel.objects.select_for_update().filter(name=name).first()
    if model is None:
        raise InvalidInput(f"no model named {name!r}")
    return model


def switch_ready(ready: dict[str, set[int]]) -> list[str]:
    """Make each target that is ready everywhere the live version (idempotent: any worker may run it); the models."""
    switched: list[str] = []
    for model in RegisteredModel.objects.filter(target_version__gt=0).only("id", "name", "target_version"):
        if model.target_version not in ready.get(model.name, set()):
            continue
        target = model.target_version
        updated = RegisteredModel.objects.filter(pk=model.pk, target_version=target).update(
            previous_version=F("live_version"), live_version=target, target_version=0)
        if updated:
            ModelVersion.objects.filter(model_id=model.pk, number=target).update(live_since=timezone.now())
            switched.append(model.name)
    return switched
