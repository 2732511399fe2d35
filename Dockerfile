# draftgate: the proxy (and, for laptops, the vLLM emulator) in one small image.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY draftgate draftgate
COPY policy policy
COPY proxy proxy
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin draftgate
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 10001
WORKDIR /home/draftgate
# Inside a container the proxy must listen on every interface; the port is the Service's.
ENV DRAFTGATE_HOST=0.0.0.0 \
    DRAFTGATE_PORT=8000 \
    PYTHONUNBUFFERED=1
EXPOSE 8000
# http, or https when the proxy serves it (tls_certfile), on DRAFTGATE_PORT
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-m", "draftgate.proxy.healthcheck"]
ENTRYPOINT ["draftgate", "serve"]
CMD ["--config", "/etc/draftgate/draftgate.yaml"]
